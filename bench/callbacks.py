"""``make bench-callbacks``: decision callbacks, measured against real loopback receivers.

For each database (SQLite, PostgreSQL): a fresh database, an org and connection made with
the real CLI, ``signoff serve`` started as users start it (API and delivery worker in one
process, except where said), receivers in this process on loopback ports. Then:

1. latency: one decision at a time, each request with a callback to one healthy receiver.
   Per decision: *commit to receipt* (receipt time minus the payload's ``decided_at``,
   which is taken before the decision's transaction even begins, so it bounds the time
   from commit to receipt from above) and *PATCH sent to receipt*. p50 and p99.
2. throughput: N requests spread over 100 receivers, of which 10 always answer 500; an
   emergency stop with ``cancel_pending`` cancels them all, against ``signoff serve
   --no-worker``, so that every callback is due and none sent; then a ``signoff worker``
   starts and drains the backlog. Healthy deliveries per second (first to last healthy
   receipt) and the worker's CPU time per attempt, and the same with the 10 failing
   receivers left out (90 healthy only), run before and after (once every failing
   delivery has made its last attempt), to see what failing receivers cost the healthy
   ones: against the mean of the two, so that the database growing from one drain to
   the next is not counted as their cost. ``--triples N`` runs the three drains N times
   and gives the cost (in rate, and in the worker's CPU) as a mean with its 95 %
   confidence interval.
3. steady load, below saturation: decisions at a fixed rate (open loop, ``--steady-rate``
   per second) to 20 healthy receivers, with and without a stream of decisions to 10
   always-failing receivers beside them (``--failing-rate`` per second, started
   ``--steady-warmup`` seconds earlier so that their retries are a standing backlog when
   the measurement begins). This stage runs its own ``signoff serve`` with short retry
   delays (``SIGNOFF_DELIVERY_RETRY_DELAYS_SECONDS``, 10 retries 1 s apart), so every
   failing delivery keeps retrying through the measurement. Per healthy decision: commit
   to receipt, PATCH sent to receipt, PATCH answer time (p50, p99); the healthy receipts
   per second; the failing attempts per second made meanwhile; and the share of a core
   the server used. Runs without and with the failing stream alternate
   (``--steady-rounds``), so each pair shares the machine's conditions.

Figures are printed and written to ``bench/results/callbacks.json``; nothing asserts a
timing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from bench.receiver import Receiver, Reply
from bench.run import (
    DEFAULT_POSTGRES_URL,
    KEEPALIVE_EXPIRY,
    RATE_LIMIT_CEILING,
    RESULTS_DIR,
    SIGNOFF,
    BenchError,
    Server,
    bench_env,
    check_postgres,
    load_average,
    log,
    postgres_database,
    running,
    signoff_cli,
)

# Idle connections are dropped before the API's keep-alive timeout can close them under a
# request just sent (bench.run.KEEPALIVE_EXPIRY).
CLIENT_LIMITS = httpx.Limits(keepalive_expiry=KEEPALIVE_EXPIRY)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def parse_time(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


class WallClockReceiver(Receiver):
    """Also notes the wall-clock time of each receipt, to compare with ``decided_at``."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.wall: dict[str, float] = {}

    def _reply_for(self, request: Any) -> Reply:
        self.wall[request.headers.get("x-service-delivery-id", "")] = time.time()
        return super()._reply_for(request)


async def create_requests(
    client: httpx.AsyncClient, headers: dict[str, str], urls: list[str], concurrency: int = 16
) -> list[str]:
    ids: list[str] = []
    queue = list(enumerate(urls))

    async def creator() -> None:
        while queue:
            index, url = queue.pop()
            response = await client.post(
                "/api/v1/approvals",
                json={
                    "title": f"bench {index}",
                    "description": "callback benchmark",
                    "priority": "low",
                    "callback_url": url,
                },
                headers=headers,
            )
            if response.status_code != 201:
                raise BenchError(f"create failed: {response.status_code} {response.text}")
            ids.append(response.json()["id"])

    await asyncio.gather(*(creator() for _ in range(concurrency)))
    return ids


async def bench_latency(base_url: str, headers: dict[str, str], count: int) -> dict[str, Any]:
    async with (
        WallClockReceiver() as receiver,
        httpx.AsyncClient(base_url=base_url, timeout=30, limits=CLIENT_LIMITS) as client,
    ):
        ids = await create_requests(client, headers, [receiver.url] * count)
        commit_to_receipt: list[float] = []
        patch_to_receipt: list[float] = []
        undelivered = 0
        for request_id in ids:
            sent = time.time()
            response = await client.patch(
                f"/api/v1/approvals/{request_id}", json={"decision": "approve"}, headers=headers
            )
            body = response.json()
            if not body.get("callback_delivered"):
                undelivered += 1
                continue
            request = receiver.received[-1]
            received = receiver.wall[request.headers["x-service-delivery-id"]]
            decided_at = parse_time(json.loads(request.body)["decided_at"])
            commit_to_receipt.append((received - decided_at) * 1000)
            patch_to_receipt.append((received - sent) * 1000)
    return {
        "decisions": count,
        "undelivered": undelivered,
        "commit_to_receipt_ms": {
            "p50": round(percentile(commit_to_receipt, 0.50), 2),
            "p99": round(percentile(commit_to_receipt, 0.99), 2),
            "max": round(max(commit_to_receipt), 2),
        },
        "patch_sent_to_receipt_ms": {
            "p50": round(percentile(patch_to_receipt, 0.50), 2),
            "p99": round(percentile(patch_to_receipt, 0.99), 2),
            "mean": round(statistics.fmean(patch_to_receipt), 2),
        },
    }


class WorkerProcess(Server):
    """``signoff worker`` (no port to serve), for the throughput stage's drain."""

    def loop_counts(self) -> dict[str, int]:
        """What its delivery loop did, from the line it logs when it stops."""
        match = re.search(
            r"delivery worker stopped: (.*)", self.log_path.read_text(errors="replace")
        )
        if match is None:
            return {}
        return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", match.group(1))}

    def __init__(self, name: str, env: dict[str, str], cwd: Path) -> None:
        self.name = name
        self.port = 0
        self.url = ""
        self.log_path = cwd / f"{name}.log"
        self._log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            [str(SIGNOFF), "worker"], env=env, cwd=cwd, stdout=self._log, stderr=subprocess.STDOUT
        )


async def bench_throughput(
    base_url: str,
    admin_headers: dict[str, str],
    *,
    healthy: int,
    failing: int,
    per_receiver: int,
    start_worker: Callable[[], WorkerProcess],
) -> dict[str, Any]:
    """One drain. With failing receivers, the worker then runs on until every failing
    delivery has made its last attempt, so that the next drain starts on a clean backlog."""
    good = [Receiver() for _ in range(healthy)]
    bad = [Receiver(default=Reply(500, b"always failing")) for _ in range(failing)]
    for receiver in good + bad:
        await receiver.__aenter__()
    try:
        async with httpx.AsyncClient(
            base_url=base_url, timeout=120, limits=CLIENT_LIMITS
        ) as client:
            urls = [r.url for r in good + bad for _ in range(per_receiver)]
            await create_requests(client, admin_headers, urls)
            started = time.monotonic()
            response = await client.put(
                "/api/v1/emergency-stop",
                json={"active": True, "cancel_pending": True},
                headers=admin_headers,
            )
            if response.status_code != 200:
                raise BenchError(f"emergency stop failed: {response.text}")
            cancelled = time.monotonic()
            # Every callback is now due, and no process delivers yet (the API runs without
            # a worker): the worker started now finds the whole backlog at once.
            worker = start_worker()
            try:
                expected = healthy * per_receiver
                deadline = time.monotonic() + 300
                cpu_at_first: float | None = None
                while (arrived := sum(len(r.received) for r in good)) < expected:
                    if cpu_at_first is None and arrived:
                        cpu_at_first = worker.cpu_seconds()
                    if time.monotonic() > deadline:
                        raise BenchError("healthy deliveries did not all arrive")
                    await asyncio.sleep(0.005)
                done = time.monotonic()
                drain_cpu = worker.cpu_seconds() - (cpu_at_first or 0.0)
                await _settle(bad, failing * per_receiver * ATTEMPTS_PER_DELIVERY)
            finally:
                worker.stop()
            loop_counts = worker.loop_counts()
            await client.put(
                "/api/v1/emergency-stop", json={"active": False}, headers=admin_headers
            )
        receipts = sorted(r.at for receiver in good for r in receiver.received)
        failing_attempts = sum(len(r.received) for r in bad)
        failing_attempts_in_drain = sum(
            1 for r in bad for a in r.received if receipts[0] <= a.at <= done
        )
    finally:
        for receiver in good + bad:
            await receiver.close()
    span = receipts[-1] - receipts[0]
    return {
        "receivers": healthy + failing,
        "failing_receivers": failing,
        "healthy_deliveries": expected,
        "failing_attempts_seen": failing_attempts,
        "failing_attempts_during_drain": failing_attempts_in_drain,
        "cancel_request_s": round(cancelled - started, 3),
        "healthy_per_second": round(expected / span, 1) if span > 0 else None,
        # The worker's CPU time (all threads) from the first healthy receipt to the last:
        # unlike the rate, barely moved by other work on the machine.
        "worker_cpu_s_during_drain": round(drain_cpu, 2),
        "worker_cpu_ms_per_attempt": round(
            1000 * drain_cpu / (expected + failing_attempts_in_drain), 2
        ),
        # The worker's loop over its whole life (the drain, then the failing deliveries'
        # last retries): attempts, claim transactions, due-time lookups, short waits.
        "worker_loop": loop_counts,
    }


# Attempts a failing delivery makes on the default schedule: the first and three retries.
ATTEMPTS_PER_DELIVERY = 4


def failing_cost(results: dict[str, Any]) -> float | None:
    """How much slower the healthy deliveries drained beside failing receivers than
    alone (the mean of the healthy-only drains before and after), in percent."""
    alone = [results[k]["healthy_per_second"] for k in HEALTHY_ONLY_DRAINS]
    beside = results["throughput_with_failing"]["healthy_per_second"]
    if beside is None or None in alone:
        return None
    return round(100 * (1 - beside / statistics.fmean(alone)), 1)


def failing_cpu_cost(results: dict[str, Any]) -> float:
    """How much more CPU the worker spent draining the healthy deliveries beside failing
    receivers than alone (their own attempts included), in percent."""
    alone = statistics.fmean(results[k]["worker_cpu_s_during_drain"] for k in HEALTHY_ONLY_DRAINS)
    beside = results["throughput_with_failing"]["worker_cpu_s_during_drain"]
    return round(100 * (beside / alone - 1), 1)


# Student's t, two-sided 95 %, by degrees of freedom (a normal quantile beyond).
_T95 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26,
        10: 2.23, 12: 2.18, 15: 2.13, 20: 2.09, 30: 2.04}  # fmt: skip


def mean_with_interval(values: list[float]) -> dict[str, Any]:
    """The mean of repeated measurements and its 95 % confidence interval."""
    if not values:
        return {"n": 0}
    summary: dict[str, Any] = {"n": len(values), "mean": round(statistics.fmean(values), 1)}
    if len(values) > 1:
        df = len(values) - 1
        t = _T95[max(k for k in _T95 if k <= df)] if df <= 30 else 1.96
        half = t * statistics.stdev(values) / len(values) ** 0.5
        summary["ci95"] = [round(summary["mean"] - half, 1), round(summary["mean"] + half, 1)]
    return summary


HEALTHY_ONLY_DRAINS = ("throughput_healthy_only", "throughput_healthy_only_after")
# The throughput stage's drains, in order: results key, failing receivers, description.
THROUGHPUT_DRAINS = (
    ("throughput_healthy_only", 0, "90 healthy receivers only"),
    ("throughput_with_failing", 10, "100 receivers, 10 failing"),
    ("throughput_healthy_only_after", 0, "90 healthy receivers only, again"),
)


async def _settle(failing: list[Receiver], attempts: int, timeout: float = 60.0) -> None:
    """Wait until the failing receivers have seen ``attempts`` in all (every delivery
    to them failed for good)."""
    deadline = time.monotonic() + timeout
    while sum(len(r.received) for r in failing) < attempts:
        if time.monotonic() > deadline:
            raise BenchError("failing deliveries did not all make their last attempt")
        await asyncio.sleep(0.1)


# The steady stage's server: every failing delivery retries 10 times, 1 s apart, so it
# stays in the backlog (and due again every second) for 10 s after its decision.
STEADY_RETRY_DELAYS = ",".join(["1"] * 10)
STEADY_HEALTHY_RECEIVERS = 20
STAGES = ("latency", "throughput", "steady")
STEADY_FAILING_RECEIVERS = 10


async def _paced(ids: list[str], rate: float, action: Any) -> list[asyncio.Task[Any]]:
    """Start ``action(id)`` for each id at a fixed rate (open loop: never waits for one)."""
    tasks: list[asyncio.Task[Any]] = []
    start = time.monotonic()
    for index, request_id in enumerate(ids):
        delay = start + index / rate - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(action(request_id)))
    return tasks


async def bench_steady(
    base_url: str,
    headers: dict[str, str],
    *,
    rate: float,
    failing_rate: float,
    seconds: float,
    warmup: float,
    cpu_seconds: Callable[[], float],
) -> dict[str, Any]:
    good = [WallClockReceiver() for _ in range(STEADY_HEALTHY_RECEIVERS)]
    bad = [Receiver(default=Reply(500, b"always failing")) for _ in range(STEADY_FAILING_RECEIVERS)]
    for receiver in good + bad:
        await receiver.__aenter__()
    try:
        limits = httpx.Limits(
            max_connections=200, max_keepalive_connections=200, keepalive_expiry=KEEPALIVE_EXPIRY
        )
        async with httpx.AsyncClient(base_url=base_url, timeout=60, limits=limits) as client:
            healthy_count = round(rate * seconds)
            failing_count = round(failing_rate * (warmup + seconds))
            healthy_ids = await create_requests(
                client, headers, [good[i % len(good)].url for i in range(healthy_count)]
            )
            failing_ids = await create_requests(
                client, headers, [bad[i % len(bad)].url for i in range(failing_count)]
            )
            sent: dict[str, float] = {}
            answered: dict[str, float] = {}
            undelivered = 0

            async def decide(request_id: str) -> None:
                nonlocal undelivered
                started = time.time()
                response = await client.patch(
                    f"/api/v1/approvals/{request_id}", json={"decision": "approve"}, headers=headers
                )
                if response.status_code != 200:
                    raise BenchError(f"decision failed: {response.status_code} {response.text}")
                sent[request_id] = started
                answered[request_id] = time.time() - started
                if not response.json()["callback_delivered"]:
                    undelivered += 1

            async def decide_failing(request_id: str) -> None:
                await client.patch(
                    f"/api/v1/approvals/{request_id}", json={"decision": "reject"}, headers=headers
                )

            failing_stream = asyncio.create_task(
                _paced(failing_ids, failing_rate, decide_failing) if failing_ids else _none()
            )
            await asyncio.sleep(warmup if failing_ids else 0)
            window_start = time.monotonic()
            failing_before = sum(len(r.received) for r in bad)
            cpu_before = cpu_seconds()
            healthy_tasks = await _paced(healthy_ids, rate, decide)
            await asyncio.gather(*healthy_tasks)
            deadline = time.monotonic() + 60
            while sum(len(r.received) for r in good) < healthy_count:
                if time.monotonic() > deadline:
                    raise BenchError("healthy deliveries did not all arrive")
                await asyncio.sleep(0.01)
            window_end = time.monotonic()
            window_cpu = cpu_seconds() - cpu_before
            failing_in_window = [
                r for receiver in bad for r in receiver.received if r.at >= window_start
            ]
            failing_during = sum(len(r.received) for r in bad) - failing_before
            await asyncio.gather(*await failing_stream)
            # Let the failing backlog run out before the next run starts.
            last = -1
            quiet_since = time.monotonic()
            while time.monotonic() - quiet_since < 2.5:
                count = sum(len(r.received) for r in bad)
                if count != last:
                    last, quiet_since = count, time.monotonic()
                await asyncio.sleep(0.1)
        commit_to_receipt: list[float] = []
        sent_to_receipt: list[float] = []
        receipts: list[float] = []
        seen: set[str] = set()
        for receiver in good:
            for request in receiver.received:
                payload = json.loads(request.body)
                request_id = payload["request_id"]
                if request_id in seen:
                    continue  # a duplicate delivery: the first receipt counts
                seen.add(request_id)
                wall = receiver.wall[request.headers["x-service-delivery-id"]]
                commit_to_receipt.append((wall - parse_time(payload["decided_at"])) * 1000)
                sent_to_receipt.append((wall - sent[request_id]) * 1000)
                receipts.append(request.at)
    finally:
        for receiver in good + bad:
            await receiver.close()
    receipts.sort()
    span = receipts[-1] - receipts[0]
    window = window_end - window_start
    answers = [v * 1000 for v in answered.values()]
    return {
        "offered_rate": rate,
        "failing_rate": failing_rate,
        "healthy_decisions": healthy_count,
        "undelivered_on_first_attempt": undelivered,
        "healthy_receipts_per_second": round((len(receipts) - 1) / span, 1) if span else None,
        "commit_to_receipt_ms": _summary(commit_to_receipt),
        "patch_sent_to_receipt_ms": _summary(sent_to_receipt),
        "patch_answer_ms": _summary(answers),
        "failing_attempts_during_window": failing_during,
        "failing_attempts_per_second": round(failing_during / window, 1),
        # Share of one core the server used during the measurement (all its threads).
        "server_cpu_share": round(window_cpu / window, 3),
        "failing_deliveries_retrying_in_window": len(
            {r.headers["x-service-delivery-id"] for r in failing_in_window}
        ),
    }


async def _none() -> list[asyncio.Task[Any]]:
    return []


def _summary(values: list[float]) -> dict[str, float]:
    return {
        "p50": round(percentile(values, 0.50), 2),
        "p99": round(percentile(values, 0.99), 2),
        "max": round(max(values), 2),
    }


def run_steady(
    target: str,
    env: dict[str, str],
    workdir: Path,
    headers: dict[str, str],
    args: argparse.Namespace,
) -> list[dict[str, Any]]:
    """Healthy-only and with-failing runs, alternated, on one server with short retries."""
    steady_env = dict(env, SIGNOFF_DELIVERY_RETRY_DELAYS_SECONDS=STEADY_RETRY_DELAYS)
    server = Server(f"signoff-{target}-steady", [str(SIGNOFF), "serve"], steady_env, workdir)
    runs = []
    with running(server):
        for round_number in range(1, args.steady_rounds + 1):
            for failing_rate in (0.0, args.failing_rate):
                log(
                    f"[{target}] steady round {round_number}: {args.steady_rate}/s healthy, "
                    f"{failing_rate}/s to failing receivers, load {load_average():.2f}"
                )
                result = asyncio.run(
                    bench_steady(
                        server.url,
                        headers,
                        rate=args.steady_rate,
                        failing_rate=failing_rate,
                        seconds=args.steady_seconds,
                        warmup=args.steady_warmup,
                        cpu_seconds=server.cpu_seconds,
                    )
                )
                result["round"] = round_number
                result["load_average_after"] = load_average()
                log(
                    f"[{target}]   commit->receipt p50 {result['commit_to_receipt_ms']['p50']} ms"
                    f" p99 {result['commit_to_receipt_ms']['p99']} ms; "
                    f"{result['healthy_receipts_per_second']}/s healthy; "
                    f"{result['failing_attempts_per_second']}/s failing attempts; "
                    f"server CPU {result['server_cpu_share']:.0%}"
                )
                runs.append(result)
    return runs


def bench_database(target: str, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    from signoff.crypto import generate_secret_key

    workdir.mkdir()
    if target == "sqlite":
        return _bench_on(target, f"sqlite:///{workdir / 'signoff.storage.database'}", args, workdir)
    check_postgres(args.postgres_url)
    with postgres_database(args.postgres_url) as url:
        _ = generate_secret_key
        return _bench_on(target, url, args, workdir)


def _bench_on(target: str, url: str, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    from signoff.crypto import generate_secret_key

    env = bench_env(url, generate_secret_key())
    env["SIGNOFF_LOG_LEVEL"] = "warning"
    signoff_cli(env, workdir, "db", "upgrade")
    org = signoff_cli(env, workdir, "org", "create", "bench", "--json")
    user = signoff_cli(
        env, workdir, "user", "create", "--org", org["id"], "--email", "ops@bench.example",
        "--name", "Bench Ops", "--role", "admin", "--json",
    )  # fmt: skip
    connection = signoff_cli(
        env, workdir, "connection", "create", "--org", org["id"], "--owner", user["id"],
        "--name", "bench", "--rate-limit", str(RATE_LIMIT_CEILING), "--json",
    )  # fmt: skip
    headers = {"Authorization": f"Bearer {connection['api_key']}"}
    results: dict[str, Any] = {}
    stages = args.stages
    if "latency" in stages:
        server = Server(f"signoff-{target}", [str(SIGNOFF), "serve"], env, workdir)
        with running(server):
            log(f"[{target}] latency: {args.decisions} sequential decisions")
            results["latency"] = asyncio.run(bench_latency(server.url, headers, args.decisions))
            results["server_peak_rss_mb"] = round(server.peak_rss_mb(), 1)
    if "throughput" in stages:
        # The API without a worker; a `signoff worker` started once the backlog is there.
        api = Server(f"signoff-{target}-api", [str(SIGNOFF), "serve", "--no-worker"], env, workdir)
        runs = iter(range(1000))

        # At info level the worker logs what its loop did when it stops.
        worker_env = {**env, "SIGNOFF_LOG_LEVEL": "info"}

        def start_worker() -> WorkerProcess:
            return WorkerProcess(f"signoff-{target}-worker-{next(runs)}", worker_env, workdir)

        with running(api):
            # Healthy only first: the mixed drain leaves failing deliveries with retries to
            # go (it waits for their last attempts, so the next drain starts clean). Then
            # healthy only once more, on the database the two drains grew: the cost of the
            # failing receivers is measured against the mean of both healthy-only drains,
            # so that what changes from one drain to the next is not counted as theirs.
            # --triples repeats the three: one triple decides little on a shared machine.
            triples = [
                _throughput_triple(target, api.url, headers, args, start_worker)
                for _ in range(args.triples)
            ]
        results.update(triples[0])  # the first triple's drains, under their usual keys
        results["throughput_triples"] = triples
        rate_costs = [t["failing_receivers_cost_percent"] for t in triples]
        results["failing_receivers_cost_percent"] = mean_with_interval(
            [cost for cost in rate_costs if cost is not None]
        )
        results["failing_receivers_cpu_cost_percent"] = mean_with_interval(
            [t["failing_receivers_cpu_cost_percent"] for t in triples]
        )
    if "steady" in stages:
        results["steady"] = run_steady(target, env, workdir, headers, args)
    return results


def _throughput_triple(
    target: str,
    base_url: str,
    headers: dict[str, str],
    args: argparse.Namespace,
    start_worker: Callable[[], WorkerProcess],
) -> dict[str, Any]:
    """Three drains (healthy only, with failing receivers, healthy only) and the failing
    receivers' cost in rate and in CPU."""
    triple: dict[str, Any] = {}
    for key, failing, what in THROUGHPUT_DRAINS:
        log(f"[{target}] throughput: {what}")
        triple[key] = asyncio.run(
            bench_throughput(
                base_url,
                headers,
                healthy=90,
                failing=failing,
                per_receiver=args.per_receiver,
                start_worker=start_worker,
            )
        )
    triple["failing_receivers_cost_percent"] = failing_cost(triple)
    triple["failing_receivers_cpu_cost_percent"] = failing_cpu_cost(triple)
    return triple


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--databases", default="sqlite,postgres")
    parser.add_argument("--postgres-url", default=DEFAULT_POSTGRES_URL)
    parser.add_argument("--decisions", type=int, default=300)
    parser.add_argument("--per-receiver", type=int, default=20)
    parser.add_argument("--stages", default=",".join(STAGES))
    parser.add_argument("--steady-rate", type=float, default=40.0)
    parser.add_argument("--failing-rate", type=float, default=3.0)
    parser.add_argument("--steady-seconds", type=float, default=20.0)
    parser.add_argument("--steady-warmup", type=float, default=8.0)
    parser.add_argument("--steady-rounds", type=int, default=2)
    parser.add_argument(
        "--triples", type=int, default=1, help="throughput: how many times to run its three drains"
    )
    args = parser.parse_args(argv)
    args.stages = {s.strip() for s in args.stages.split(",") if s.strip()}
    results: dict[str, Any] = {"load_average_at_start": load_average(), "databases": {}}
    with tempfile.TemporaryDirectory(prefix="signoff-bench-callbacks-") as tmp:
        for target in [d.strip() for d in args.databases.split(",") if d.strip()]:
            try:
                results["databases"][target] = bench_database(target, args, Path(tmp) / target)
            except BenchError as exc:
                log(f"[{target}] failed: {exc}")
                return 1
    results["load_average_at_end"] = load_average()
    RESULTS_DIR.mkdir(exist_ok=True)
    name = (
        "callbacks" if args.stages == set(STAGES) else "callbacks-" + "-".join(sorted(args.stages))
    )
    (RESULTS_DIR / f"{name}.json").write_text(json.dumps(results, indent=2) + "\n")
    json.dump(results, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
