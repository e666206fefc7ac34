"""``make bench-notifications``: notifications against real loopback servers.

On a fresh SQLite database (or PostgreSQL with ``--postgres URL``), the app runs in this
process with its background loops (the sender is woken by each create's commit), an SMTP
server (aiosmtpd's protocol) and a Slack receiver on loopback ports. Then:

1. latency: ``--mails`` creates one at a time, each matching a rule that mails one person.
   Per create: *create sent to mail accepted* (the create's commit happens after it is
   sent, so this bounds commit-to-accepted from above). p50 and p99.
2. burst: ``--burst`` creates paced evenly over ``--burst-seconds``, each matching a rule
   with one Slack channel, and the same burst for an org without rules before and after
   it (the machine's load drifts during a run). The Slack messages
   per one-second window (the promise: at most one per channel per interval), the
   notifications sent (none lost: every request is in exactly one message), and the
   create latency p50/p99 with routing on and off (with routing on a create writes a plan
   row, which wakes the worker in this process to plan and send meanwhile; the org
   without routing has no channel, so its creates write no plan row and wake nobody).

With ``--processes``, the deployment with a worker of its own: ``signoff serve
--no-worker`` and ``signoff worker`` run as two processes, and this process is the client,
over HTTP (and the SMTP server and the Slack receiver). On SQLite the worker is not woken
by the API's commits (another process's), so it polls every ``--poll`` seconds; on
PostgreSQL the commits' ``NOTIFY`` wakes it.

In the embedded shape the startup objects are frozen out of the garbage collector after
the app is built, as ``signoff serve`` does.

Figures are printed and written to ``bench/results/notifications.json`` (or
``notifications-processes.json``); nothing asserts a timing.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import re
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from bench.mailserver import smtp_server
from bench.receiver import Receiver
from bench.run import RESULTS_DIR, Server, bench_env, log, postgres_database
from signoff.app import create_app
from signoff.common.time import utcnow
from signoff.config import Settings, normalize_database_url
from signoff.context import AppContext
from signoff.migrations import upgrade_to_head
from signoff.orgs import service as orgs_service
from signoff.serving import keep_startup_objects_out_of_collections
from signoff.wiring import Wiring

RATE_LIMIT = 100_000_000


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def summary(values: list[float]) -> dict[str, float]:
    return {
        "p50_ms": round(statistics.median(values) * 1000, 2),
        "p99_ms": round(percentile(values, 0.99) * 1000, 2),
        "count": len(values),
    }


async def make_org(ctx: AppContext, name: str) -> tuple[dict[str, str], str]:
    """An org with one admin and its API key; answers (headers, admin e-mail)."""
    now = utcnow()
    async with ctx.transaction() as uow:
        org = await orgs_service.create_org(uow.orgs, name, now)
        email = f"admin@{name.lower()}.example"
        user = await orgs_service.create_user(
            uow.orgs, org.id, email=email, name="Admin", role="admin", password=None, now=now
        )
        issued = await orgs_service.create_connection(
            uow.orgs,
            ctx.box,
            ctx.settings,
            org.id,
            owner=user,
            name="bench",
            rate_limit=RATE_LIMIT,
            now=now,
        )
    return {"Authorization": f"Bearer {issued.api_key}"}, email


async def put_routing(api: httpx.AsyncClient, headers: dict[str, str], doc: dict[str, Any]) -> None:
    answer = await api.put("/api/v1/routing", json=doc, headers=headers)
    answer.raise_for_status()


BODY = {"title": "Deploy", "description": "Bench request", "priority": "high"}


async def bench_latency(
    api: httpx.AsyncClient, box: Any, headers: dict[str, str], count: int
) -> dict[str, Any]:
    delays = []
    for _ in range(count):
        before = len(box.mails)
        sent = time.perf_counter()
        answer = await api.post("/api/v1/approvals", json=BODY, headers=headers)
        answer.raise_for_status()
        await box.wait_for(before + 1, timeout=30)
        delays.append(time.perf_counter() - sent)
    return summary(delays)


async def paced_creates(
    api: httpx.AsyncClient, headers: dict[str, str], count: int, seconds: float
) -> list[float]:
    times: list[float] = []
    start = time.perf_counter()

    async def one(index: int) -> None:
        await asyncio.sleep(max(0.0, start + index * seconds / count - time.perf_counter()))
        began = time.perf_counter()
        answer = await api.post(
            "/api/v1/approvals", json={**BODY, "title": f"Burst {index}"}, headers=headers
        )
        answer.raise_for_status()
        times.append(time.perf_counter() - began)

    await asyncio.gather(*(one(i) for i in range(count)))
    return times


async def _all_told(slack: Receiver, count: int, timeout: float = 60.0) -> None:
    """Until the Slack messages received name ``count`` requests (or ``timeout``)."""
    deadline = time.monotonic() + timeout
    while sum(requests_in(json.loads(r.body)) for r in slack.received) < count:
        if time.monotonic() > deadline:
            return
        await asyncio.sleep(0.1)


def requests_in(message: dict[str, Any]) -> int:
    found = re.match(r"(\d+) requests wait", message["text"])
    return int(found.group(1)) if found else 1


async def bench_burst(
    api: httpx.AsyncClient, ctx: AppContext, count: int, seconds: float
) -> dict[str, Any]:
    on_headers, _ = await make_org(ctx, "Burst")
    off_headers, _ = await make_org(ctx, "Quiet")
    async with Receiver() as slack:
        await put_routing(
            api,
            on_headers,
            {
                "channels": {"team": {"type": "slack", "webhook_url": slack.url}},
                "rules": [{"channels": ["team"]}],
            },
        )
        # Off, on, off again: the database grows and the machine's load drifts during a
        # run, so routing on is compared with routing off on both sides of it.
        off = await paced_creates(api, off_headers, count, seconds)
        on = await paced_creates(api, on_headers, count, seconds)
        # The burst's last digests go out after its last create: the second routing-off
        # round starts once they are in, so it measures routing off, not their tail.
        await _all_told(slack, count)
        received = list(slack.received)
        off_after = await paced_creates(api, off_headers, count, seconds)
    first = received[0].at if received else 0.0
    windows = Counter(int(r.at - first) for r in received)
    told = sum(requests_in(json.loads(r.body)) for r in received)
    off_summary, on_summary, after_summary = summary(off), summary(on), summary(off_after)
    off_p50 = (off_summary["p50_ms"] + after_summary["p50_ms"]) / 2
    return {
        "creates": count,
        "seconds": seconds,
        "slack_messages": len(received),
        "requests_in_messages": told,
        "lost": count - told,
        "most_messages_in_one_second": max(windows.values()) if windows else 0,
        # The windows above start at the first message; the receiver's clock adds the
        # network's jitter to the sender's spacing, so the gaps themselves are given too.
        "shortest_gap_between_messages_s": round(
            min((b.at - a.at for a, b in itertools.pairwise(received)), default=0.0), 3
        ),
        "create_routing_off": off_summary,
        "create_routing_on": on_summary,
        "create_routing_off_after": after_summary,
        "create_p50_on_over_off": round(on_summary["p50_ms"] / off_p50, 2),
        "create_no_slower": no_slower(off_summary, on_summary, after_summary),
    }


# Routing-off rounds of one run further apart than this ratio (p50 or p99): disturbed.
DISTURBED = 1.5


def no_slower(
    off: dict[str, float], on: dict[str, float], off_after: dict[str, float]
) -> dict[str, Any]:
    """The issue's "request creation no slower than with routing off", per run: routing
    on's p50 and p99 each no higher than the higher of the two routing-off rounds around
    it. The two routing-off rounds differ only by the run's noise (the same work, 10 s
    apart), so that spread is the margin, and nothing more: a routing-on round slower
    than both routing-off rounds is slower. ``noise_ms`` gives the spread.

    A run whose routing-off rounds disagree by more than ``DISTURBED`` (other work on the
    machine hit one of them) would give routing on a margin that large: it is marked
    ``disturbed`` and its verdict does not count either way."""
    verdict: dict[str, Any] = {}
    for figure in ("p50_ms", "p99_ms"):
        verdict[figure.removesuffix("_ms")] = on[figure] <= max(off[figure], off_after[figure])
    verdict["disturbed"] = any(
        max(off[f], off_after[f]) > DISTURBED * min(off[f], off_after[f])
        for f in ("p50_ms", "p99_ms")
    )
    verdict["met"] = None if verdict["disturbed"] else verdict["p50"] and verdict["p99"]
    verdict["noise_ms"] = {
        figure.removesuffix("_ms"): round(abs(off[figure] - off_after[figure]), 2)
        for figure in ("p50_ms", "p99_ms")
    }
    return verdict


SECRET_KEY = "bench-notifications"


async def scenarios(
    api: httpx.AsyncClient, ctx: AppContext, box: Any, args: argparse.Namespace
) -> dict[str, Any]:
    headers, _ = await make_org(ctx, "Mail")
    await put_routing(
        api,
        headers,
        {
            "channels": {"mail": {"type": "email"}},
            "rules": [{"channels": ["mail"], "audience": "admins"}],
        },
    )
    log(f"latency: {args.mails} creates, one at a time")
    latency = await bench_latency(api, box, headers, args.mails)
    log(f"burst: {args.burst} creates over {args.burst_seconds} s")
    burst = await bench_burst(api, ctx, args.burst, args.burst_seconds)
    return {"create_sent_to_mail_accepted": latency, "burst": burst}


async def run(database_url: str, args: argparse.Namespace) -> dict[str, Any]:
    """The embedded shape: the API, its background loops and this client in one process."""
    async with smtp_server() as (box, smtp_url):
        settings = Settings(
            database_url=database_url,
            secret_key=SECRET_KEY,
            smtp_url=smtp_url,
            rate_limit_ceiling=RATE_LIMIT,
            rate_limit_default=RATE_LIMIT,
        )
        wiring = Wiring.from_settings(settings)
        app = create_app(settings, wiring=wiring, background=True)
        # As ``signoff serve`` does between building the app and serving it: without it,
        # a full collection walks every startup object, once a run, in whichever round it
        # falls (docs/decisions/0007-gc-freeze-at-startup.md).
        keep_startup_objects_out_of_collections()
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://bench") as api:
                results = await scenarios(api, wiring.ctx, box, args)
    return {"mode": "one process", **results}


async def run_processes(
    database_url: str, args: argparse.Namespace, workdir: Path
) -> dict[str, Any]:
    """``signoff serve --no-worker`` and ``signoff worker`` as processes of their own; this
    process is the client (HTTP) and the receivers. Orgs are made through a context of
    this process on the same database (no background loops)."""
    async with smtp_server() as (box, smtp_url):
        env = bench_env(database_url, SECRET_KEY)
        env.update(
            SIGNOFF_SMTP_URL=smtp_url,
            SIGNOFF_RATE_LIMIT_DEFAULT=str(RATE_LIMIT),
            SIGNOFF_NOTIFICATION_POLL_INTERVAL_SECONDS=str(args.poll),
        )
        cli = [sys.executable, "-m", "signoff.cli"]
        server = Server("serve", [*cli, "serve", "--no-worker"], env, workdir)
        with (workdir / "worker.log").open("wb") as worker_log:
            worker = await asyncio.create_subprocess_exec(
                *cli, "worker", env=env, cwd=workdir, stdout=worker_log, stderr=worker_log
            )
        settings = Settings(
            database_url=database_url,
            secret_key=SECRET_KEY,
            rate_limit_ceiling=RATE_LIMIT,
            rate_limit_default=RATE_LIMIT,
        )
        wiring = Wiring.from_settings(settings)
        try:
            await asyncio.to_thread(server.wait_ready)
            limits = httpx.Limits(max_connections=200, max_keepalive_connections=200)
            async with httpx.AsyncClient(base_url=server.url, limits=limits, timeout=30) as api:
                results = await scenarios(api, wiring.ctx, box, args)
        finally:
            await wiring.close()
            worker.terminate()
            try:
                await asyncio.wait_for(worker.wait(), timeout=20)
            except TimeoutError:
                worker.kill()
            await asyncio.to_thread(server.stop)
    return {"mode": "serve --no-worker + worker", "worker_poll_seconds": args.poll, **results}


async def measure(url: str, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    if args.processes:
        return await run_processes(url, args, workdir)
    return await run(url, args)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--postgres", help="a PostgreSQL admin URL; SQLite when absent")
    parser.add_argument("--mails", type=int, default=200)
    parser.add_argument("--burst", type=int, default=1000)
    parser.add_argument("--burst-seconds", type=float, default=10.0)
    parser.add_argument(
        "--processes",
        action="store_true",
        help="serve --no-worker and worker as processes of their own; this one the client",
    )
    parser.add_argument(
        "--poll",
        type=float,
        default=0.1,
        help="with --processes: the worker's SIGNOFF_NOTIFICATION_POLL_INTERVAL_SECONDS",
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as workdir:
        if args.postgres:
            with postgres_database(args.postgres) as admin_form:
                url = normalize_database_url(admin_form)  # the app's own driver
                upgrade_to_head(url)
                results = asyncio.run(measure(url, args, Path(workdir)))
        else:
            url = f"sqlite+aiosqlite:///{Path(workdir) / 'bench.db'}"
            upgrade_to_head(url)
            results = asyncio.run(measure(url, args, Path(workdir)))
    RESULTS_DIR.mkdir(exist_ok=True)
    name = "notifications-processes.json" if args.processes else "notifications.json"
    (RESULTS_DIR / name).write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
