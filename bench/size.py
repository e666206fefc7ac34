"""``make bench-size``: one org with a million requests, seeded directly (not through
HTTP), on SQLite and PostgreSQL.

- List pages, filters, cursor pages and full-text searches, each called ``--samples``
  times one after another against ``signoff serve``: p50 and p95 (target: p95 < 30 ms).
- SQLite creates per second (wrk, as ``make bench``) on a database of ``--small`` requests
  and on the large one (target: the large figure >= 80 % of the small one).

Seeding: rows are made in Python with the values the API would write and inserted in
batches (SQLite: the application's own compiled insert, then the search index's catch-up;
PostgreSQL: COPY). ``--rows`` sets the size (the issue's scenario is the default).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

from bench.run import (
    ACTION_TYPES,
    DEFAULT_POSTGRES_URL,
    PRIORITIES,
    RATE_LIMIT_CEILING,
    RESULTS_DIR,
    SIGNOFF,
    SOURCES,
    WORDS,
    BenchError,
    Options,
    Server,
    bench_env,
    log,
    machine_info,
    measure,
    postgres_database,
    running,
    signoff_cli,
)

TARGET_P95_MS = 30.0
TARGET_CREATE_SHARE = 0.80
STATUSES = ("pending", "approved", "rejected", "cancelled")
BATCH = 20_000
# (name, query parameters) of the list calls measured; "cursor" pages are walked.
LIST_CALLS: list[tuple[str, dict[str, str]]] = [
    ("page 1", {}),
    ("page 50", {"page": "50"}),
    ("status=pending", {"status": "pending"}),
    ("priority=critical", {"priority": "critical"}),
    ("action_type", {"action_type": "db.migrate"}),
    ("status+priority", {"status": "approved", "priority": "high"}),
    ("search 1 word", {"search": "kernel"}),
    ("search 2 words", {"search": "billing refund"}),
    ("search rare", {"search": "zanzibar"}),
]


def request_rows(
    org_id: uuid.UUID, connection_id: uuid.UUID, count: int
) -> Iterator[dict[str, Any]]:
    """``count`` requests over the past year, newest last, with varied words and values."""
    from signoff.common.ids import new_id

    rng = random.Random(42)
    start = datetime.now(UTC) - timedelta(days=365)
    step = timedelta(days=365) / max(1, count)
    for index in range(count):
        words = rng.sample(WORDS, 12)
        if index % 100_000 == 7:
            words[3] = "zanzibar"
        created = start + step * index
        status = STATUSES[rng.randrange(len(STATUSES))] if index < count - 2_000 else "pending"
        yield {
            "id": new_id(),
            "org_id": org_id,
            "connection_id": connection_id,
            "title": " ".join(words[:4]).capitalize() + f" #{index}",
            "description": " ".join(words) + f". Ticket OPS-{index}.",
            "status": status,
            "priority": PRIORITIES[index % len(PRIORITIES)],
            "action_type": ACTION_TYPES[index % len(ACTION_TYPES)],
            "source": SOURCES[(index // 5) % len(SOURCES)],
            "metadata": {"ticket": f"OPS-{index}"},
            "callback_url": None,
            "callback_headers_encrypted": None,
            "required_approvals": 1,
            "current_approvals": 0 if status == "pending" else 1,
            "is_sequential": False,
            "idempotency_key": None,
            "expires_at": None,
            "created_at": created,
            "updated_at": created,
            "comments_count": 0,
            "has_steps": False,
        }


def _batches(rows: Iterator[dict[str, Any]]) -> Iterator[list[dict[str, Any]]]:
    batch: list[dict[str, Any]] = []
    for row in rows:
        batch.append(row)
        if len(batch) == BATCH:
            yield batch
            batch = []
    if batch:
        yield batch


def seed_sqlite(path: Path, org_id: uuid.UUID, connection_id: uuid.UUID, count: int) -> None:
    from sqlalchemy.dialects import sqlite as sqlite_dialect

    from signoff.approvals.repository import _INSERT_REQUEST
    from signoff.approvals.search_index import SQLITE_CATCH_UP

    compiled = _INSERT_REQUEST["sqlite"].for_sqlite(sqlite_dialect.dialect())
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    for batch in _batches(request_rows(org_id, connection_id, count)):
        db.execute("BEGIN")
        db.executemany(compiled.sql, [compiled.parameters(row) for row in batch])
        for statement in SQLITE_CATCH_UP:
            db.execute(statement)
        db.execute("COMMIT")
    db.execute("ANALYZE")
    db.close()


async def seed_postgres(dsn: str, org_id: uuid.UUID, connection_id: uuid.UUID, count: int) -> None:
    import asyncpg  # type: ignore[import-untyped]

    from signoff.approvals.repository import NEW_REQUEST_COLUMNS

    connection = await asyncpg.connect(dsn)
    try:
        for batch in _batches(request_rows(org_id, connection_id, count)):
            records = [
                tuple(
                    json.dumps(row[c]) if c == "metadata" else row[c] for c in NEW_REQUEST_COLUMNS
                )
                for row in batch
            ]
            await connection.copy_records_to_table(
                "approval_requests", records=records, columns=list(NEW_REQUEST_COLUMNS)
            )
        await connection.execute("VACUUM ANALYZE approval_requests")
    finally:
        await connection.close()


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def measure_lists(base: str, api_key: str, samples: int) -> list[dict[str, Any]]:
    results = []
    headers = {"Authorization": f"Bearer {api_key}"}
    with httpx.Client(base_url=base, headers=headers, timeout=60) as client:
        calls = [*LIST_CALLS, ("cursor pages", {})]
        for name, params in calls:
            timings = []
            cursor = None
            for _ in range(samples):
                query = dict(params)
                if name == "cursor pages" and cursor:
                    query["cursor"] = cursor
                started = time.perf_counter()
                response = client.get("/api/v1/approvals", params=query)
                timings.append((time.perf_counter() - started) * 1000)
                if response.status_code != 200:
                    raise BenchError(f"{name}: {response.status_code} {response.text}")
                cursor = response.json().get("next_cursor")
            result = {
                "call": name,
                "p50_ms": round(statistics.median(timings), 2),
                "p95_ms": round(_percentile(timings, 0.95), 2),
                "met": _percentile(timings, 0.95) < TARGET_P95_MS,
            }
            log(f"    {name:<20} p50 {result['p50_ms']:7.2f} ms  p95 {result['p95_ms']:7.2f} ms")
            results.append(result)
    return results


def bench_database(
    target: str, rows: int, opts: Options, args: argparse.Namespace, workdir: Path
) -> dict[str, Any]:
    from signoff.crypto import generate_secret_key
    from signoff.storage.asyncpg_shape import asyncpg_dsn

    workdir.mkdir()
    report: dict[str, Any] = {"target": target, "rows": rows}
    with fresh_database(target, opts, workdir) as url:
        env = bench_env(url, generate_secret_key())
        signoff_cli(env, workdir, "db", "upgrade")
        org = signoff_cli(env, workdir, "org", "create", "Big", "--json")
        user = signoff_cli(
            env, workdir, "user", "create", "--org", org["id"], "--email", "big@example.com",
            "--name", "Big", "--role", "admin", "--json",
        )  # fmt: skip
        connection = signoff_cli(
            env, workdir, "connection", "create", "--org", org["id"], "--owner", user["id"],
            "--name", "big", "--rate-limit", str(RATE_LIMIT_CEILING), "--json",
        )  # fmt: skip
        log(f"[{target}] seeding {rows:,} requests directly")
        started = time.monotonic()
        org_id, connection_id = uuid.UUID(org["id"]), uuid.UUID(connection["id"])
        if target == "sqlite":
            seed_sqlite(workdir / "signoff.db", org_id, connection_id, rows)
        else:
            asyncio.run(seed_postgres(asyncpg_dsn(url), org_id, connection_id, rows))
        report["seed_seconds"] = round(time.monotonic() - started, 1)
        log(f"[{target}] seeded in {report['seed_seconds']} s")
        server = Server(f"size-{target}", [str(SIGNOFF), "serve"], env, workdir)
        with running(server):
            report["lists"] = measure_lists(server.url, connection["api_key"], args.samples)
            if target == "sqlite":
                auth = [f"Authorization: Bearer {connection['api_key']}"]
                create = measure(
                    opts, workdir, server, target, "create", "/api/v1/approvals", "create",
                    None, auth,
                )  # fmt: skip
                report["create_rps"] = create.rps
                report["create_p99_ms"] = create.p99_ms
    return report


@contextmanager
def fresh_database(target: str, opts: Options, workdir: Path) -> Iterator[str]:
    """A fresh database for ``target``: a file in ``workdir`` or a PostgreSQL database."""
    if target == "sqlite":
        yield f"sqlite:///{workdir / 'signoff.db'}"
        return
    with postgres_database(opts.postgres_url) as url:
        yield url


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make bench-size", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--small", type=int, default=10_000, help="SQLite's small database")
    parser.add_argument("--samples", type=int, default=100, help="calls per list query")
    parser.add_argument("--duration", type=int, default=10, help="seconds of creates (wrk)")
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--databases", default="sqlite,postgresql")
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get("SIGNOFF_BENCH_POSTGRES_URL", DEFAULT_POSTGRES_URL),
    )
    parser.add_argument("--output", type=Path, default=RESULTS_DIR / "size.json")
    args = parser.parse_args(argv)
    databases = [d.strip() for d in args.databases.split(",") if d.strip()]
    opts = Options(
        duration=args.duration, connections=args.connections, threads=2, seed=0,
        list_pages=50, databases=databases, postgres_url=args.postgres_url,
        output=args.output,
    )  # fmt: skip
    reports = []
    try:
        with tempfile.TemporaryDirectory(prefix="signoff-size-") as tmp:
            workdir = Path(tmp)
            if "sqlite" in databases:
                small = bench_database("sqlite", args.small, opts, args, workdir / "sqlite-small")
                reports.append(small)
                large = bench_database("sqlite", args.rows, opts, args, workdir / "sqlite-large")
                reports.append(large)
                share = large["create_rps"] / max(small["create_rps"], 0.1)
                log(
                    f"[sqlite] creates at {args.rows:,} rows: {share:.0%} of those at "
                    f"{args.small:,} (target >= {TARGET_CREATE_SHARE:.0%})"
                )
            if "postgresql" in databases:
                reports.append(
                    bench_database("postgresql", args.rows, opts, args, workdir / "postgresql")
                )
    except BenchError as exc:
        log(f"error: {exc}")
        return 1
    result = {"machine": machine_info(), "options": vars(args) | {"output": str(args.output)}}
    result["reports"] = reports
    print(json.dumps(reports, indent=2))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
