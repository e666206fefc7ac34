"""Long polls woken by a decision: how soon after it every waiting caller has its answer.

``make bench-longpoll`` starts ``signoff serve`` on SQLite (and PostgreSQL with
``--databases sqlite,postgresql``), creates one request, holds ``--waiters`` long polls
(``GET /api/v1/approvals/:id?wait=60``) open on it, decides it, and measures, for every
waiter, the time from sending the decision to receiving its answer. The target: 1,000
waiters all answered within 1 s of the decision on SQLite.

The waiters are raw HTTP/1.1 connections on one event loop, so the client's own cost
stays small beside the server's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench.run import (
    DEFAULT_POSTGRES_URL,
    HOST,
    SIGNOFF,
    BenchError,
    Server,
    bench_env,
    log,
    postgres_database,
    running,
    signoff_cli,
)

TARGET_SECONDS = 1.0


async def _hold_long_poll(port: int, path: str, key: str, opened: asyncio.Event) -> float:
    """Send one long poll, and return the monotonic time its answer arrived."""
    reader, writer = await asyncio.open_connection(HOST, port)
    try:
        request = (
            f"GET {path} HTTP/1.1\r\nHost: {HOST}\r\nAuthorization: Bearer {key}\r\n"
            "Connection: close\r\n\r\n"
        )
        writer.write(request.encode())
        await writer.drain()
        opened.set()
        head = await reader.readuntil(b"\r\n\r\n")
        arrived = time.monotonic()
        status = head.split(b" ", 2)[1]
        if status != b"200":
            raise BenchError(f"a long poll answered {status.decode()}")
        await reader.read()
        return arrived
    finally:
        writer.close()


async def measure_wakeup(server: Server, key: str, waiters: int, settle: float) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(base_url=server.url, headers=headers, timeout=30) as client:
        created = await client.post(
            "/api/v1/approvals",
            json={"title": "Long poll bench", "description": "woken", "priority": "high"},
        )
        request_id = created.json()["id"]
        path = f"/api/v1/approvals/{request_id}?wait=60"
        opened = [asyncio.Event() for _ in range(waiters)]
        polls = [
            asyncio.create_task(_hold_long_poll(server.port, path, key, event)) for event in opened
        ]
        await asyncio.gather(*(event.wait() for event in opened))
        # Every request is sent; give the server time to read them all and start waiting.
        await asyncio.sleep(settle)
        if any(poll.done() for poll in polls):
            await asyncio.gather(*polls)  # raises what went wrong
            raise BenchError("long polls answered before the decision")
        sent = time.monotonic()
        decided = await client.patch(
            f"/api/v1/approvals/{request_id}", json={"decision": "approve"}
        )
        acknowledged = time.monotonic() - sent
        if decided.status_code != 200:
            raise BenchError(f"the decision answered {decided.status_code}: {decided.text}")
        arrivals = sorted(arrival - sent for arrival in await asyncio.gather(*polls))
    return {
        "waiters": waiters,
        "decision_ms": round(acknowledged * 1000, 1),
        "first_ms": round(arrivals[0] * 1000, 1),
        "p50_ms": round(arrivals[len(arrivals) // 2] * 1000, 1),
        "p99_ms": round(arrivals[int(len(arrivals) * 0.99) - 1] * 1000, 1),
        "last_ms": round(arrivals[-1] * 1000, 1),
        "met": arrivals[-1] <= TARGET_SECONDS,
    }


def bench_database(
    target: str, url: str, args: argparse.Namespace, workdir: Path
) -> dict[str, Any]:
    from signoff.crypto import generate_secret_key

    env = bench_env(url, generate_secret_key())
    if target == "postgresql":
        signoff_cli(env, workdir, "db", "upgrade")
    org = signoff_cli(env, workdir, "org", "create", "Bench", "--json")
    user = signoff_cli(
        env, workdir, "user", "create", "--org", org["id"], "--email", "bench@example.com",
        "--name", "Bench Admin", "--role", "admin", "--json",
    )  # fmt: skip
    connection = signoff_cli(
        env, workdir, "connection", "create", "--org", org["id"], "--owner", user["id"],
        "--name", "bench", "--rate-limit", "10000", "--json",
    )  # fmt: skip
    server = Server(f"signoff-{target}", [str(SIGNOFF), "serve"], env, workdir)
    runs = []
    with running(server):
        for round_number in range(1, args.rounds + 1):
            result = asyncio.run(
                measure_wakeup(server, connection["api_key"], args.waiters, args.settle)
            )
            log(
                f"[{target}] round {round_number}: {result['waiters']} waiters, last answered "
                f"{result['last_ms']} ms after the decision (p50 {result['p50_ms']} ms)"
            )
            runs.append(result)
    return {"database": target, "runs": runs}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make bench-longpoll", description=__doc__)
    parser.add_argument("--waiters", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--settle", type=float, default=2.0, help="seconds before deciding")
    parser.add_argument("--databases", default="sqlite")
    parser.add_argument("--postgres-url", default=DEFAULT_POSTGRES_URL)
    args = parser.parse_args(argv)
    results = []
    try:
        with tempfile.TemporaryDirectory(prefix="signoff-longpoll-") as tmp:
            for target in [d.strip() for d in args.databases.split(",") if d.strip()]:
                workdir = Path(tmp) / target
                workdir.mkdir()
                if target == "postgresql":
                    with postgres_database(args.postgres_url) as url:
                        results.append(bench_database(target, url, args, workdir))
                else:
                    url = f"sqlite+aiosqlite:///{workdir / 'bench.db'}"
                    results.append(bench_database(target, url, args, workdir))
    except BenchError as exc:
        log(f"error: {exc}")
        return 1
    print(json.dumps(results, indent=2))
    for result in results:
        met = sum(run["met"] for run in result["runs"])
        print(
            f"{result['database']}: all waiters answered within {TARGET_SECONDS:.0f} s of the "
            f"decision in {met} of {len(result['runs'])} rounds"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
