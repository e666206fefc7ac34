"""``make bench-callbacks``: decision callbacks, measured against real loopback receivers.

For each database (SQLite, PostgreSQL): a fresh database, an org and connection made with
the real CLI, ``signoff serve`` started as users start it (API and delivery worker in one
process), receivers in this process on loopback ports. Then:

1. latency: one decision at a time, each request with a callback to one healthy receiver.
   Per decision: *commit to receipt* (receipt time minus the payload's ``decided_at``,
   which is taken before the decision's transaction even begins, so it bounds the time
   from commit to receipt from above) and *PATCH sent to receipt*. p50 and p99.
2. throughput: N requests spread over 100 receivers, of which 10 always answer 500; an
   emergency stop with ``cancel_pending`` cancels them all in one transaction and hands
   every callback to the delivery worker at once. Healthy deliveries per second (first to
   last healthy receipt), and the same with the 10 failing receivers left out (90 healthy
   only), to see what failing receivers cost the healthy ones.

Figures are printed and written to ``bench/results/callbacks.json``; nothing asserts a
timing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
from tests.webhooks.receiver import Receiver, Reply

from bench.run import (
    DEFAULT_POSTGRES_URL,
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
        httpx.AsyncClient(base_url=base_url, timeout=30) as client,
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


async def bench_throughput(
    base_url: str,
    admin_headers: dict[str, str],
    *,
    healthy: int,
    failing: int,
    per_receiver: int,
) -> dict[str, Any]:
    good = [Receiver() for _ in range(healthy)]
    bad = [Receiver(default=Reply(500, b"always failing")) for _ in range(failing)]
    for receiver in good + bad:
        await receiver.__aenter__()
    try:
        async with httpx.AsyncClient(base_url=base_url, timeout=120) as client:
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
            expected = healthy * per_receiver
            deadline = time.monotonic() + 300
            while sum(len(r.received) for r in good) < expected:
                if time.monotonic() > deadline:
                    raise BenchError("healthy deliveries did not all arrive")
                await asyncio.sleep(0.01)
            done = time.monotonic()
            await client.put(
                "/api/v1/emergency-stop", json={"active": False}, headers=admin_headers
            )
        receipts = sorted(r.at for receiver in good for r in receiver.received)
        failing_attempts = sum(len(r.received) for r in bad)
    finally:
        for receiver in good + bad:
            await receiver.close()
    span = receipts[-1] - receipts[0]
    return {
        "receivers": healthy + failing,
        "failing_receivers": failing,
        "healthy_deliveries": expected,
        "failing_attempts_seen": failing_attempts,
        "cancel_transaction_s": round(cancelled - started, 3),
        "cancel_to_last_healthy_s": round(done - started, 3),
        "healthy_per_second": round(expected / span, 1) if span > 0 else None,
        "first_healthy_after_cancel_ms": round((receipts[0] - cancelled) * 1000, 1),
    }


def bench_database(target: str, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    from signoff.crypto import generate_secret_key

    workdir.mkdir()
    if target == "sqlite":
        return _bench_on(target, f"sqlite:///{workdir / 'signoff.db'}", args, workdir)
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
    server = Server(f"signoff-{target}", [str(SIGNOFF), "serve"], env, workdir)
    with running(server):
        log(f"[{target}] latency: {args.decisions} sequential decisions")
        latency = asyncio.run(bench_latency(server.url, headers, args.decisions))
        log(f"[{target}] throughput: 100 receivers, 10 failing")
        mixed = asyncio.run(
            bench_throughput(
                server.url, headers, healthy=90, failing=10, per_receiver=args.per_receiver
            )
        )
        log(f"[{target}] throughput: 90 healthy receivers only")
        healthy_only = asyncio.run(
            bench_throughput(
                server.url, headers, healthy=90, failing=0, per_receiver=args.per_receiver
            )
        )
        rss = server.peak_rss_mb()
    return {
        "latency": latency,
        "throughput_with_failing": mixed,
        "throughput_healthy_only": healthy_only,
        "server_peak_rss_mb": round(rss, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--databases", default="sqlite,postgres")
    parser.add_argument("--postgres-url", default=DEFAULT_POSTGRES_URL)
    parser.add_argument("--decisions", type=int, default=300)
    parser.add_argument("--per-receiver", type=int, default=20)
    args = parser.parse_args(argv)
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
    (RESULTS_DIR / "callbacks.json").write_text(json.dumps(results, indent=2) + "\n")
    json.dump(results, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
