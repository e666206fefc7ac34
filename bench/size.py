"""``make bench-size``: one org with a million requests, seeded directly (not through
HTTP), on SQLite and PostgreSQL.

- List pages, filters (one and two at a time, date windows), full-text searches (a
  common word, two words, words in some 1,100 and some 110 requests, a rare word, a word
  with a filter) and cursor pages, each called ``--samples`` times one after another against
  ``signoff serve``: p50 and p95 (target: p95 < 30 ms).
- SQLite creates per second (wrk, as ``make bench``) on a database of ``--small`` requests
  and on the large one (target: the large figure >= 80 % of the small one).

Seeding: rows are made in Python with the values the API would write and inserted in
batches (SQLite: the application's own compiled insert, then the search index's catch-up;
PostgreSQL: COPY, the table's indexes built after it). ``--rows`` sets the size (the
issue's scenario is the default). ``--keep DIR`` keeps the large databases and reuses them
on the next run with the same ``--rows`` (migrated to the current schema first): seed once,
measure several times. The creates each run measures stay in the kept database.

``--planner PAIRS`` (with ``--keep``, SQLite) measures the index hints instead: the list
calls on two servers over the kept database, ``A`` as shipped and ``B`` with
``SIGNOFF_STOCK_SQLITE_PLANNER=1`` (SQLite's planner chooses every index), in PAIRS pairs
whose order alternates; first with no statistics (as signoff runs), then after
``ANALYZE`` (``sqlite_stat1``; ``sqlite_stat4`` too where the build has it), which the
run leaves in the database only with ``--keep-statistics``. Per call the gain of each
pair is ``1 - A/B`` on the p50.
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
from dataclasses import asdict, dataclass
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
    load_average,
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
# (name, query parameters) of the list calls measured; "cursor" pages are walked. Dates
# are relative to now: the seed spreads its requests over the past year.
LIST_CALLS: list[tuple[str, dict[str, str]]] = [
    ("page 1", {}),
    ("page 50", {"page": "50"}),
    ("status=pending", {"status": "pending"}),
    ("status=approved", {"status": "approved"}),
    ("status=approved,rejected", {"status": "approved,rejected"}),
    ("priority=critical", {"priority": "critical"}),
    ("action_type", {"action_type": "db.migrate"}),
    ("source", {"source": "zapier"}),
    ("created, last 30 days", {"created_after": "-30d"}),
    ("decided, last 7 days", {"decided_after": "-7d"}),
    ("status+priority", {"status": "approved", "priority": "high"}),
    ("priority+action_type", {"priority": "high", "action_type": "refund.issue"}),
    ("status+source", {"status": "rejected", "source": "n8n"}),
    ("pending+priority", {"status": "pending", "priority": "critical"}),
    ("priority+created window", {"priority": "low", "created_after": "-90d",
                                 "created_before": "-60d"}),
    ("status+decided window", {"status": "approved", "decided_after": "-200d",
                               "decided_before": "-190d"}),
    ("search, a common word", {"search": "kernel"}),
    ("search, two words", {"search": "billing refund"}),
    ("search, ~1,100 matches", {"search": "999"}),  # at 1M rows: ticket numbers 999...
    ("search, ~110 matches", {"search": "9999"}),
    ("search, a rare word", {"search": "zanzibar"}),
    ("search+status", {"search": "kernel", "status": "approved"}),
    ("search+priority", {"search": "billing", "priority": "critical"}),
]  # fmt: skip


def _dated(params: dict[str, str]) -> dict[str, str]:
    """``params`` with each "-Nd" made the instant N days ago."""
    now = datetime.now(UTC)
    return {
        name: (now - timedelta(days=int(value[1:-1]))).isoformat()
        if value.startswith("-") and value.endswith("d")
        else value
        for name, value in params.items()
    }


def request_rows(
    org_id: uuid.UUID, connection_id: uuid.UUID, count: int
) -> Iterator[dict[str, Any]]:
    """``count`` requests over the past year, newest last, with varied words and values."""
    from signoff.approvals.typed_rows import new_row
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
        decided = created + timedelta(hours=1 + index % 48) if status != "pending" else None
        yield new_row(
            {
                "id": new_id(),
                "org_id": org_id,
                "connection_id": connection_id,
                "title": " ".join(words[:4]).capitalize() + f" #{index}",
                "description": " ".join(words) + f". Ticket OPS-{index}.",
                "number": index + 1,
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
                "decided_at": decided,
                "cancelled_at": decided if status == "cancelled" else None,
                "comments_count": 0,
                "has_steps": False,
            }
        )


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
    # An index grown a request at a time merges its segments as it goes; left as the
    # batches wrote it, the first creates measured would pay to merge what seeding wrote.
    db.execute("INSERT INTO approval_requests_fts (approval_requests_fts) VALUES ('optimize')")
    db.close()


async def seed_postgres(dsn: str, org_id: uuid.UUID, connection_id: uuid.UUID, count: int) -> None:
    import asyncpg  # type: ignore[import-untyped]

    from signoff.approvals.typed_rows import COLUMNS

    connection = await asyncpg.connect(dsn)
    try:
        # The table's indexes built once after the COPY, as a restore does, not row by
        # row: those a constraint owns (the key, idempotency) stay.
        indexes = await connection.fetch(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'approval_requests' "
            "AND indexname NOT IN (SELECT conname FROM pg_constraint)"
        )
        for index in indexes:
            await connection.execute(f'DROP INDEX "{index["indexname"]}"')
        for batch in _batches(request_rows(org_id, connection_id, count)):
            records = [
                tuple(json.dumps(row[c]) if c == "metadata" else row[c] for c in COLUMNS)
                for row in batch
            ]
            await connection.copy_records_to_table(
                "approval_requests", records=records, columns=list(COLUMNS)
            )
        await connection.execute("SET maintenance_work_mem = '256MB'")
        for index in indexes:
            await connection.execute(index["indexdef"])
        await connection.execute("VACUUM ANALYZE approval_requests")
    finally:
        await connection.close()


PLANNER_SWITCH = "SIGNOFF_STOCK_SQLITE_PLANNER"


def compare_planner(opts: Options, args: argparse.Namespace) -> int:
    """``--planner``: the hints (A) against SQLite's own planner (B), before and after
    ANALYZE, on the kept SQLite database (see the module's docstring)."""
    result: dict[str, Any] = {"machine": machine_info(), "options": vars(args) | {}}
    result["options"]["output"] = str(args.output)
    phases: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="signoff-size-") as tmp:
        workdir = Path(tmp)
        with seeded_database("sqlite", args.rows, opts, workdir, args.keep) as seeded:
            path = Path(seeded.url.removeprefix("sqlite:///"))
            result["compile_options"] = _compile_options(path)
            _drop_statistics(path)
            try:
                for phase in ("no statistics", "ANALYZE"):
                    if phase == "ANALYZE":
                        started = time.monotonic()
                        _analyze(path)
                        phases["analyze_seconds"] = round(time.monotonic() - started, 1)
                        log(f"[planner] ANALYZE took {phases['analyze_seconds']} s")
                    phases[phase] = _planner_pairs(seeded, workdir, args, phase)
                    _write_planner(result, phases, args.output)
            finally:
                if not args.keep_statistics:
                    _drop_statistics(path)
    _write_planner(result, phases, args.output)
    return 0


def _write_planner(result: dict[str, Any], phases: dict[str, Any], output: Path) -> None:
    """The phases measured so far, each call's gains summed up, written to ``output``."""
    from bench.callbacks import mean_with_interval

    for phase in ("no statistics", "ANALYZE"):
        for call in phases.get(phase, []):
            call["gain_percent"] = mean_with_interval(call["gains"])
            log(
                f"[planner] {phase:<14} {call['call']:<26} gain "
                f"{call['gain_percent']['mean']:7.1f} %  each "
                + ", ".join(f"{g:.0f}" for g in call["gains"])
            )
    result["planner"] = phases
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(result, indent=2, default=str) + "\n")


def _planner_pairs(
    seeded: Seeded, workdir: Path, args: argparse.Namespace, phase: str
) -> list[dict[str, Any]]:
    env = bench_env(seeded.url, seeded.secret_key)
    sides = {"A": env, "B": {**env, PLANNER_SWITCH: "1"}}
    calls: dict[str, dict[str, Any]] = {}
    slug = "analyzed" if phase == "ANALYZE" else "plain"
    servers = {
        name: Server(f"planner-{slug}-{name}", [str(SIGNOFF), "serve"], side, workdir)
        for name, side in sides.items()
    }
    for server in servers.values():
        server.wait_ready(timeout=300)  # a loaded machine opens a large database slowly
    with running(servers["A"]), running(servers["B"]):
        for pair in range(args.planner):
            order = ("A", "B") if pair % 2 == 0 else ("B", "A")
            log(f"[planner] {phase}: pair {pair + 1}/{args.planner}: {' then '.join(order)}")
            measured = {
                name: measure_lists(servers[name].url, seeded.api_key, args.samples)
                for name in order
            }
            for a, b in zip(measured["A"], measured["B"], strict=True):
                call = calls.setdefault(a["call"], {"call": a["call"], "pairs": [], "gains": []})
                call["pairs"].append({"A_p50_ms": a["p50_ms"], "B_p50_ms": b["p50_ms"]})
                call["gains"].append(round(100 * (1 - a["p50_ms"] / b["p50_ms"]), 1))
    return list(calls.values())


def _compile_options(path: Path) -> list[str]:
    db = sqlite3.connect(path)
    try:
        return [row[0] for row in db.execute("PRAGMA compile_options")]
    finally:
        db.close()


def _analyze(path: Path) -> None:
    db = sqlite3.connect(path, isolation_level=None)
    try:
        db.execute("ANALYZE")
    finally:
        db.close()


def _drop_statistics(path: Path) -> None:
    """The database as signoff leaves it: no statistics for the planner."""
    db = sqlite3.connect(path, isolation_level=None)
    try:
        tables = [
            row[0]
            for row in db.execute(
                "SELECT name FROM sqlite_master WHERE name IN ('sqlite_stat1', 'sqlite_stat4')"
            )
        ]
        for table in tables:
            db.execute(f"DROP TABLE {table}")  # SQLite's own: it may drop them
    finally:
        db.close()


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
                query = _dated(params)
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


@dataclass(frozen=True)
class Seeded:
    """A migrated database holding one org of ``rows`` requests, and how to call it."""

    url: str
    secret_key: str
    api_key: str
    rows: int
    seed_seconds: float | None  # None: seeded by an earlier run (``--keep``)


def bench_database(
    target: str, rows: int, opts: Options, args: argparse.Namespace, workdir: Path
) -> dict[str, Any]:
    workdir.mkdir()
    keep = args.keep if rows > args.small else None
    with seeded_database(target, rows, opts, workdir, keep) as seeded:
        report: dict[str, Any] = {"target": target, "rows": seeded.rows}
        report["seed_seconds"] = seeded.seed_seconds
        report["load_before"] = round(load_average(), 2)
        env = bench_env(seeded.url, seeded.secret_key)
        server = Server(f"size-{target}", [str(SIGNOFF), "serve"], env, workdir)
        with running(server):
            report["lists"] = measure_lists(server.url, seeded.api_key, args.samples)
            if target == "sqlite":
                auth = [f"Authorization: Bearer {seeded.api_key}"]
                create = measure(
                    opts, workdir, server, target, "create", "/api/v1/approvals", "create",
                    None, auth,
                )  # fmt: skip
                report["create_rps"] = create.rps
                report["create_p99_ms"] = create.p99_ms
                report["create_cpu_ms"] = create.cpu_ms_per_request
        report["load_after"] = round(load_average(), 2)
    return report


@contextmanager
def seeded_database(
    target: str, rows: int, opts: Options, workdir: Path, keep: Path | None
) -> Iterator[Seeded]:
    """A database seeded with ``rows`` requests. With ``keep``, it is kept there (the
    SQLite file, or the PostgreSQL database named in a note beside it) and reused by the
    next run with the same ``rows``: the creates a run measures stay in it."""
    note = keep / f"{target}-{rows}.json" if keep else None
    if note is not None and note.exists():
        seeded = Seeded(**json.loads(note.read_text()))
        log(f"[{target}] reusing the database of {rows:,} requests kept in {keep}")
        signoff_cli(bench_env(seeded.url, seeded.secret_key), workdir, "db", "upgrade")
        yield seeded
        return
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
    with fresh_database(target, opts, keep or workdir, rows, kept=keep is not None) as url:
        seeded = seed(target, url, rows, workdir)
        if note is not None:
            note.write_text(json.dumps(asdict(seeded)))
        yield seeded


def seed(target: str, url: str, rows: int, workdir: Path) -> Seeded:
    """Migrate ``url``, make an org, a user and a connection, and seed ``rows`` requests."""
    from signoff.crypto import generate_secret_key
    from signoff.storage.asyncpg_connections import asyncpg_dsn

    secret_key = generate_secret_key()
    env = bench_env(url, secret_key)
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
        seed_sqlite(Path(url.removeprefix("sqlite:///")), org_id, connection_id, rows)
    else:
        asyncio.run(seed_postgres(asyncpg_dsn(url), org_id, connection_id, rows))
    seconds = round(time.monotonic() - started, 1)
    log(f"[{target}] seeded in {seconds} s")
    return Seeded(url, secret_key, connection["api_key"], rows, seconds)


@contextmanager
def fresh_database(
    target: str, opts: Options, directory: Path, rows: int, *, kept: bool
) -> Iterator[str]:
    """A fresh database for ``target``: a file in ``directory`` or a PostgreSQL database;
    ``kept``: not removed afterwards."""
    if target == "sqlite":
        path = directory / f"sqlite-{rows}.db"
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        yield f"sqlite:///{path}"
        return
    if kept:
        yield kept_postgres_database(opts.postgres_url, f"signoff_size_{rows}")
        return
    with postgres_database(opts.postgres_url) as url:
        yield url


def kept_postgres_database(admin_url: str, name: str) -> str:
    """The PostgreSQL database ``name``, dropped if it existed and created empty."""
    import asyncpg  # type: ignore[import-untyped]
    from sqlalchemy.engine import make_url

    async def recreate() -> None:
        conn = await asyncpg.connect(admin_url)
        try:
            await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            await conn.execute(f'CREATE DATABASE "{name}"')
        finally:
            await conn.close()

    asyncio.run(recreate())
    return make_url(admin_url).set(database=name).render_as_string(hide_password=False)


def seed_only(databases: list[str], opts: Options, args: argparse.Namespace) -> int:
    """Seed (or find already seeded) the kept large databases, and measure nothing."""
    try:
        with tempfile.TemporaryDirectory(prefix="signoff-size-") as tmp:
            for target in databases:
                workdir = Path(tmp) / target
                workdir.mkdir()
                with seeded_database(target, args.rows, opts, workdir, args.keep):
                    pass
    except BenchError as exc:
        log(f"error: {exc}")
        return 1
    return 0


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
    parser.add_argument(
        "--keep",
        type=Path,
        help="keep the large databases in this directory (and a PostgreSQL database "
        "signoff_size_ROWS) and reuse them on the next run: seed once, measure many times",
    )
    parser.add_argument(
        "--seed-only",
        action="store_true",
        help="with --keep: seed the large databases and stop (a later run measures them)",
    )
    parser.add_argument(
        "--planner",
        type=int,
        metavar="PAIRS",
        help="with --keep: the index hints against SQLite's planner, before and after ANALYZE",
    )
    parser.add_argument(
        "--keep-statistics",
        action="store_true",
        help="with --planner: leave ANALYZE's statistics in the kept database",
    )
    args = parser.parse_args(argv)
    databases = [d.strip() for d in args.databases.split(",") if d.strip()]
    opts = Options(
        duration=args.duration, connections=args.connections, threads=2, seed=0,
        list_pages=50, databases=databases, postgres_url=args.postgres_url,
        output=args.output,
    )  # fmt: skip
    if args.planner is not None:
        if args.keep is None or args.planner < 3:
            parser.error("--planner needs --keep and at least 3 pairs")
        return compare_planner(opts, args)
    if args.seed_only:
        if args.keep is None:
            parser.error("--seed-only needs --keep")
        return seed_only(databases, opts, args)
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
