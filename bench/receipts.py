"""``make bench-receipts``: checking receipts offline, and redeeming them.

1. verify: ``signoff_client.verify_receipt`` on one receipt as the server signs it (its
   claims, header and key type, from ``signoff.receipts``), against its JWKS, in a loop on
   this one process (one core) for ``--verify-seconds``. Verifications per second of CPU
   time and of wall time, against the issue's target (at least 5,000 a second on one
   core; the CPU figure is the one compared, the wall one shows what the load took).
2. redeem: ``signoff serve`` on a fresh database per ``--databases`` entry (as ``make
   bench`` deploys it), ``--redeems`` requests created with arguments and approved, then
   each receipt redeemed once with ``POST /api/v1/receipts/redeem`` by
   ``--concurrency`` clients: redeems per second, p50, p99 and the server's CPU per
   redeem. Every answer must be 200 (each receipt is redeemed once).

Figures are printed and written to ``bench/results/receipts.json``; nothing asserts a
timing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import orjson

from bench.run import (
    DEFAULT_POSTGRES_URL,
    KEEPALIVE_EXPIRY,
    RESULTS_DIR,
    Options,
    deployed,
    load_average,
    log,
)

VERIFY_TARGET_PER_SECOND = 5_000
ARGUMENTS = {"service": "billing", "replicas": 3, "regions": ["eu", "us"]}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def signed_receipt() -> tuple[str, dict[str, Any]]:
    """A receipt as the server issues one (``receipts.service.claims_of``, signed by a
    ``receipts.keys.SigningKey``), and the JWKS that verifies it."""
    from joserfc.jwk import OKPKey

    from signoff.receipts.arguments import arguments_hash
    from signoff.receipts.keys import SigningKey, public_jwk
    from signoff.receipts.repository import IssuedReceipt
    from signoff.receipts.service import claims_of

    kid = str(uuid.uuid4())
    key = SigningKey(kid, OKPKey.generate_key("Ed25519"))
    issued = datetime.now(UTC).replace(microsecond=0)
    receipt = IssuedReceipt(
        jti=uuid.uuid4(),
        request_id=uuid.uuid4(),
        org_id=uuid.uuid4(),
        kid=kid,
        issuer="https://signoff.example",
        action_type="deploy.prod",
        arguments_hash=arguments_hash(ARGUMENTS),
        preview_hash=None,
        decided_by=[str(uuid.uuid4())],
        issued_at=issued,
        expires_at=issued + timedelta(seconds=3600),
        max_uses=1,
        uses=0,
        stored_token_encrypted=None,
    )
    claims = claims_of(receipt)
    return key.sign(orjson.dumps(claims)), {"keys": [public_jwk(key.key, kid)]}


def bench_verify(seconds: float) -> dict[str, Any]:
    from signoff_client import verify_receipt
    from signoff_client._receipts import key_set

    token, jwks = signed_receipt()
    keys = key_set(jwks)  # as client.jwks() hands it over: imported once
    verify_receipt(token, jwks=keys, arguments=ARGUMENTS, action_type="deploy.prod")
    count = 0
    load_before = load_average()
    cpu_start, wall_start = time.process_time(), time.perf_counter()
    deadline = wall_start + seconds
    while time.perf_counter() < deadline:
        for _ in range(200):
            verify_receipt(token, jwks=keys, arguments=ARGUMENTS, action_type="deploy.prod")
        count += 200
    cpu = time.process_time() - cpu_start
    wall = time.perf_counter() - wall_start
    per_cpu_second = count / cpu
    figure = {
        "verifications": count,
        "per_cpu_second": round(per_cpu_second),
        "per_wall_second": round(count / wall),
        "cpu_us_per_verify": round(cpu / count * 1e6, 1),
        "target_per_second": VERIFY_TARGET_PER_SECOND,
        "met": per_cpu_second >= VERIFY_TARGET_PER_SECOND,
        "load_before": load_before,
        "load_after": load_average(),
    }
    verdict = "met" if figure["met"] else "MISSED"
    print(
        f"verify_receipt: {figure['per_cpu_second']:,}/s of one core's CPU "
        f"({figure['per_wall_second']:,}/s wall, {figure['cpu_us_per_verify']} µs each); "
        f"target >= {VERIFY_TARGET_PER_SECOND:,}/s: {verdict}",
        flush=True,
    )
    return figure


async def _approved_receipts(client: httpx.AsyncClient, count: int) -> list[str]:
    """``count`` requests created with arguments, approved, and their receipts."""
    semaphore = asyncio.Semaphore(16)

    async def one(index: int) -> str:
        async with semaphore:
            created = await client.post(
                "/api/v1/approvals",
                json={
                    "title": f"Deploy #{index}",
                    "description": "Roll out billing",
                    "priority": "high",
                    "arguments": {**ARGUMENTS, "n": index},
                },
            )
            created.raise_for_status()
            decided = await client.patch(
                f"/api/v1/approvals/{created.json()['id']}", json={"decision": "approve"}
            )
            decided.raise_for_status()
            return str(decided.json()["receipt"])

    return await asyncio.gather(*(one(index) for index in range(count)))


async def _redeem_all(
    client: httpx.AsyncClient, tokens: list[str], concurrency: int
) -> tuple[list[float], dict[int, int], float]:
    queue = list(reversed(tokens))
    latencies: list[float] = []
    statuses: dict[int, int] = {}

    async def worker() -> None:
        while queue:
            token = queue.pop()
            started = time.perf_counter()
            answer = await client.post("/api/v1/receipts/redeem", json={"receipt": token})
            latencies.append(time.perf_counter() - started)
            statuses[answer.status_code] = statuses.get(answer.status_code, 0) + 1

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return latencies, statuses, time.perf_counter() - started


def bench_redeem(
    target: str, opts: Options, workdir: Path, count: int, concurrency: int
) -> dict[str, Any]:
    with deployed(target, opts, workdir) as deployment:
        headers = {"Authorization": f"Bearer {deployment.api_key}"}

        async def run() -> tuple[list[float], dict[int, int], float, float]:
            # Idle connections dropped before the server closes them, as bench.run does:
            # else a request may go out on a connection the server is closing.
            async with httpx.AsyncClient(
                base_url=deployment.server.url,
                headers=headers,
                timeout=60.0,
                limits=httpx.Limits(keepalive_expiry=KEEPALIVE_EXPIRY),
            ) as client:
                log(f"[{target}] approving {count:,} requests with arguments")
                tokens = await _approved_receipts(client, count)
                cpu_before = deployment.server.cpu_seconds()
                latencies, statuses, seconds = await _redeem_all(client, tokens, concurrency)
                return latencies, statuses, seconds, deployment.server.cpu_seconds() - cpu_before

        load_before = load_average()
        latencies, statuses, seconds, cpu = asyncio.run(run())
    figure = {
        "target": target,
        "redeems": len(latencies),
        "statuses": {str(code): n for code, n in sorted(statuses.items())},
        "rps": round(len(latencies) / seconds, 1),
        "p50_ms": round(percentile(latencies, 0.50) * 1000, 2),
        "p99_ms": round(percentile(latencies, 0.99) * 1000, 2),
        "cpu_ms_per_redeem": round(cpu / len(latencies) * 1000, 3),
        "concurrency": concurrency,
        "load_before": load_before,
        "load_after": load_average(),
    }
    print(
        f"redeem [{target}]: {figure['rps']:,} /s  p50 {figure['p50_ms']} ms  "
        f"p99 {figure['p99_ms']} ms  CPU {figure['cpu_ms_per_redeem']} ms/redeem  "
        f"answers {figure['statuses']}",
        flush=True,
    )
    return figure


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="make bench-receipts", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--verify-seconds", type=float, default=5.0)
    parser.add_argument("--redeems", type=int, default=2_000, help="receipts redeemed per database")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--databases", default="sqlite,postgresql")
    parser.add_argument(
        "--postgres-url", default=DEFAULT_POSTGRES_URL, help="where the bench may create a database"
    )
    parser.add_argument("--output", type=Path, default=RESULTS_DIR / "receipts.json")
    args = parser.parse_args(argv)
    databases = [name.strip() for name in args.databases.split(",") if name.strip()]
    if unknown := set(databases) - {"sqlite", "postgresql"}:
        parser.error(f"unknown database(s): {', '.join(sorted(unknown))}")
    opts = Options(
        duration=0,
        connections=args.concurrency,
        threads=1,
        seed=0,
        list_pages=1,
        databases=databases,
        postgres_url=args.postgres_url,
        output=args.output,
        scenarios=(),
    )
    report: dict[str, Any] = {
        "started_at": datetime.now(UTC).isoformat(),
        "machine_load": load_average(),
    }
    report["verify"] = bench_verify(args.verify_seconds)
    with tempfile.TemporaryDirectory(prefix="signoff-bench-receipts-") as tmp:
        report["redeem"] = [
            bench_redeem(target, opts, Path(tmp) / target, args.redeems, args.concurrency)
            for target in databases
        ]
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n")
    log(f"written to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
