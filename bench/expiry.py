"""``make bench-expiry``: 100,000 requests expiring at the same instant, while another org
uses the API.

For each database (SQLite, PostgreSQL): a fresh database, two orgs and their connections
made with the real CLI. The *storm* org's requests are seeded directly (not through HTTP,
as ``make bench-size`` does): ``--requests`` pending requests, each with a
``callback_url`` to a loopback receiver, all with one ``expires_at``, the *instant*,
``--lead`` seconds after seeding ends. Then signoff runs as each database's documented
deployment starts it (SQLite: ``signoff serve``, sweep and delivery worker in the API's
process; PostgreSQL: ``signoff serve --no-worker`` and a ``signoff worker``), and the
other org calls the API at a steady ``--api-rate`` (open loop: creates, gets and list
pages in turn), from before the instant until the storm is over.

Reported, per database:
- time from the instant until no request of the storm org is stored pending (all recorded
  expired; the bench checks the count of expired ones too);
- time from the instant until the receiver has had a callback for every request (distinct
  request ids), and how many it got twice;
- the other org's API latency (p50, p99, max, errors) for calls started before the
  instant (the baseline) and during the storm (from the instant until both are done);
- the CPU time each signoff process used during the storm.

The receiver is ``bench.receiver.Receiver`` in ``--receivers`` processes of their own
sharing one port (``SO_REUSEPORT``), so that neither it nor the load's own client takes
turns with the other. Targets: both within 60 s on either database, the API's
p99 under 100 ms meanwhile. Figures are printed and written to
``bench/results/expiry.json``; nothing asserts a timing.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import os
import random
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from multiprocessing.connection import Connection as Pipe
from pathlib import Path
from typing import Any

import httpx

from bench.callbacks import WorkerProcess, percentile
from bench.receiver import Received, Receiver, Reply
from bench.run import (
    DEFAULT_POSTGRES_URL,
    KEEPALIVE_EXPIRY,
    PRIORITIES,
    RATE_LIMIT_CEILING,
    REPO_DIR,
    RESULTS_DIR,
    SIGNOFF,
    WORDS,
    BenchError,
    Server,
    approval_body,
    bench_env,
    check_postgres,
    load_average,
    log,
    machine_info,
    postgres_database,
    running,
    signoff_cli,
)

TARGET_SECONDS = 60.0
TARGET_P99_MS = 100.0
SEED_BATCH = 10_000
# How often the bench looks at the database and the receivers while the storm runs.
POLL_SECONDS = 0.25
# The other org's calls, in turn.
CALLS = ("create", "get", "list", "get")


# ---- the receiver, in processes of its own ----


class CountingReceiver(Receiver):
    """Notes the first receipt (wall clock) of each request id, and counts repeats."""

    def __init__(self, port: int, counter: Any) -> None:
        super().__init__(port=port)
        self.first: dict[str, float] = {}
        self.repeats = 0
        self.counter = counter

    async def __aenter__(self) -> CountingReceiver:
        self._server = await asyncio.start_server(
            self._on_connection, "127.0.0.1", self.requested_port, reuse_port=True
        )
        self.port = self.requested_port
        return self

    def _reply_for(self, request: Received) -> Reply:
        import orjson

        request_id = orjson.loads(request.body)["request_id"]
        if request_id in self.first:
            self.repeats += 1
        else:
            self.first[request_id] = time.time()
            self.counter.value += 1
        self.received.clear()  # nothing else is kept: 100,000 bodies are not needed
        return self.default


def _receiver_process(port: int, counter: Any, pipe: Pipe) -> None:
    """Serve until the parent asks; answer its every ask with what was received so far."""
    import uvloop

    async def serve() -> None:
        async with CountingReceiver(port, counter) as receiver:
            # The pipe stays blocking (the loop never watches it): asks and answers go
            # through a thread, so the loop keeps serving while a large answer is sent.
            while True:
                ask = await asyncio.to_thread(pipe.recv)
                report = {"first": dict(receiver.first), "repeats": receiver.repeats}
                await asyncio.to_thread(pipe.send, report)
                if ask == "stop":
                    return

    uvloop.run(serve())


class ReceiverFleet:
    """``count`` receiver processes on one loopback port."""

    def __init__(self, count: int) -> None:
        context = multiprocessing.get_context("spawn")
        self.port = _free_reusable_port()
        self.url = f"http://127.0.0.1:{self.port}/hook"
        self.counters = [context.RawValue("q", 0) for _ in range(count)]
        self.pipes: list[Pipe] = []
        self.processes = []
        for counter in self.counters:
            ours, theirs = context.Pipe()
            process = context.Process(
                target=_receiver_process, args=(self.port, counter, theirs), daemon=True
            )
            process.start()
            self.pipes.append(ours)
            self.processes.append(process)
        self._wait_listening()

    def _wait_listening(self) -> None:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port)):
                return
            time.sleep(0.05)
        raise BenchError("the receivers did not start listening")

    def distinct_so_far(self) -> int:
        """Request ids received, summed over the processes (a repeat that lands on another
        process than the first receipt counts twice: ``collect`` tells them apart)."""
        return sum(counter.value for counter in self.counters)

    def collect(self, ask: str = "report") -> tuple[dict[str, float], int]:
        """Every request id's first receipt (wall clock) over all processes, and repeats."""
        first: dict[str, float] = {}
        repeats = 0
        for pipe in self.pipes:
            pipe.send(ask)
        for pipe in self.pipes:
            report = pipe.recv()
            repeats += report["repeats"]
            for request_id, at in report["first"].items():
                if request_id in first:
                    repeats += 1
                    first[request_id] = min(first[request_id], at)
                else:
                    first[request_id] = at
        return first, repeats

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.collect("stop")
        for process in self.processes:
            process.join(timeout=5)
            if process.is_alive():
                process.kill()


def _free_reusable_port() -> int:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


# ---- seeding ----


def storm_rows(
    org_id: uuid.UUID, connection_id: uuid.UUID, count: int, callback_url: str, expires_at: datetime
) -> Iterator[dict[str, Any]]:
    """``count`` pending requests, each with a callback, all expiring at ``expires_at``:
    every column, as a create writes it (``typed_rows.new_row``)."""
    from signoff.approvals.typed_rows import new_row
    from signoff.common.ids import new_id

    rng = random.Random(24)
    start = datetime.now(UTC) - timedelta(hours=1)
    for index in range(count):
        words = rng.sample(WORDS, 8)
        created = start + timedelta(milliseconds=index)
        yield new_row(
            {
                "id": new_id(),
                "org_id": org_id,
                "connection_id": connection_id,
                "title": " ".join(words[:4]).capitalize() + f" #{index}",
                "description": " ".join(words) + f". Ticket EXP-{index}.",
                "number": index + 1,
                "status": "pending",
                "priority": PRIORITIES[index % len(PRIORITIES)],
                "metadata": {"ticket": f"EXP-{index}"},
                "callback_url": callback_url,
                "required_approvals": 1,
                "expires_at": expires_at,
                "created_at": created,
                "updated_at": created,
            }
        )


def _batches(rows: Iterator[dict[str, Any]]) -> Iterator[list[dict[str, Any]]]:
    batch: list[dict[str, Any]] = []
    for row in rows:
        batch.append(row)
        if len(batch) == SEED_BATCH:
            yield batch
            batch = []
    if batch:
        yield batch


def seed_sqlite(path: Path, rows: Iterator[dict[str, Any]]) -> None:
    """The application's own compiled insert, then the search index's catch-up."""
    from sqlalchemy.dialects import sqlite as sqlite_dialect

    from signoff.approvals.repository import _INSERT_REQUEST
    from signoff.approvals.search_index import SQLITE_CATCH_UP

    compiled = _INSERT_REQUEST["sqlite"].for_sqlite(sqlite_dialect.dialect())
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    for batch in _batches(rows):
        db.execute("BEGIN")
        db.executemany(compiled.sql, [compiled.parameters(row) for row in batch])
        for statement in SQLITE_CATCH_UP:
            db.execute(statement)
        db.execute("COMMIT")
    db.execute("ANALYZE")
    db.close()


async def seed_postgres(dsn: str, rows: Iterator[dict[str, Any]]) -> None:
    """COPY, then ``VACUUM ANALYZE``."""
    import asyncpg  # type: ignore[import-untyped]

    from signoff.approvals.typed_rows import COLUMNS

    connection = await asyncpg.connect(dsn)
    try:
        for batch in _batches(rows):
            records = [
                tuple(json.dumps(row[c]) if c == "metadata" else row[c] for c in COLUMNS)
                for row in batch
            ]
            await connection.copy_records_to_table(
                "approval_requests", records=records, columns=list(COLUMNS)
            )
        await connection.execute("VACUUM ANALYZE approval_requests")
    finally:
        await connection.close()


# ---- watching the storm ----


class StoredCounts:
    """How many of the storm org's requests are stored pending, and expired."""

    def __init__(self, target: str, url: str, org_id: str) -> None:
        self.target = target
        self.url = url
        self.org_id = org_id
        self._pg: Any = None

    async def __aenter__(self) -> StoredCounts:
        if self.target == "postgresql":
            import asyncpg

            from signoff.storage.asyncpg_connections import asyncpg_dsn

            self._pg = await asyncpg.connect(asyncpg_dsn(self.url))
        return self

    async def __aexit__(self, *_: object) -> None:
        if self._pg is not None:
            await self._pg.close()

    async def count(self, status: str) -> int:
        if self._pg is not None:
            value: int = await self._pg.fetchval(
                "SELECT count(*) FROM approval_requests WHERE org_id = $1 AND status = $2",
                uuid.UUID(self.org_id),
                status,
            )
            return value
        return await asyncio.to_thread(self._sqlite_count, status)

    def _sqlite_count(self, status: str) -> int:
        path = self.url.removeprefix("sqlite:///")
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
        try:
            # Stored as the 32 hex digits SQLAlchemy's Uuid type writes on SQLite.
            (value,) = db.execute(
                "SELECT count(*) FROM approval_requests WHERE org_id = ? AND status = ?",
                (uuid.UUID(self.org_id).hex, status),
            ).fetchone()
            return int(value)
        finally:
            db.close()


@dataclass
class Call:
    kind: str
    started: float  # wall clock
    ms: float
    ok: bool


@dataclass
class Load:
    """The other org's steady calls: open loop, ``rate`` a second, until stopped."""

    base_url: str
    api_key: str
    rate: float
    calls: list[Call] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)
    unanswered: int = 0

    async def run(self, stop: asyncio.Event) -> None:
        limits = httpx.Limits(
            max_connections=64, max_keepalive_connections=64, keepalive_expiry=KEEPALIVE_EXPIRY
        )
        headers = {"Authorization": f"Bearer {self.api_key}"}
        async with httpx.AsyncClient(
            base_url=self.base_url, headers=headers, limits=limits, timeout=30
        ) as client:
            tasks: set[asyncio.Task[None]] = set()
            start = time.monotonic()
            index = 0
            while not stop.is_set():
                delay = start + index / self.rate - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                task = asyncio.create_task(self._call(client, CALLS[index % len(CALLS)], index))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
                index += 1
            # Calls still unanswered a while after the storm are counted as failed.
            _, late = await asyncio.wait(tasks, timeout=10) if tasks else (set(), set())
            for task in late:
                task.cancel()
            self.unanswered = len(late)

    async def _call(self, client: httpx.AsyncClient, kind: str, index: int) -> None:
        if kind == "get" and not self.ids:
            kind = "create"
        started_wall = time.time()
        started = time.perf_counter()
        try:
            if kind == "create":
                response = await client.post("/api/v1/approvals", json=approval_body(index))
            elif kind == "get":
                response = await client.get(f"/api/v1/approvals/{random.choice(self.ids)}")
            else:
                response = await client.get("/api/v1/approvals", params={"page": 1 + index % 5})
            ok = response.status_code < 300
        except (httpx.HTTPError, asyncio.CancelledError):
            ok = False
            response = None
        ms = (time.perf_counter() - started) * 1000
        self.calls.append(Call(kind, started_wall, ms, ok))
        if kind == "create" and response is not None and ok:
            self.ids.append(response.json()["id"])


def latency_summary(calls: list[Call]) -> dict[str, Any]:
    if not calls:
        return {"calls": 0}
    times = [c.ms for c in calls]
    return {
        "calls": len(calls),
        "errors": sum(1 for c in calls if not c.ok),
        "p50_ms": round(percentile(times, 0.50), 2),
        "p99_ms": round(percentile(times, 0.99), 2),
        "max_ms": round(max(times), 2),
        "by_kind_p99_ms": {
            kind: round(percentile([c.ms for c in calls if c.kind == kind], 0.99), 2)
            for kind in sorted({c.kind for c in calls})
        },
    }


async def watch_storm(
    *,
    instant: float,
    requests: int,
    counts: StoredCounts,
    receivers: ReceiverFleet,
    load: Load,
    timeout: float,
    processes: list[Server],
) -> dict[str, Any]:
    """Run the load from now until the storm is over (or ``timeout`` after the instant)."""
    stop = asyncio.Event()
    load_task = asyncio.create_task(load.run(stop))
    await asyncio.sleep(max(0.0, instant - time.time()))
    cpu_before = {p.name: p.cpu_seconds() for p in processes}
    all_expired_at: float | None = None
    progress: list[tuple[float, int, int]] = []
    while time.time() < instant + timeout:
        if all_expired_at is None:
            pending = await counts.count("pending")
            if pending == 0:
                all_expired_at = time.time()
        else:
            pending = 0
        received = receivers.distinct_so_far()
        progress.append((round(time.time() - instant, 2), requests - pending, received))
        if all_expired_at is not None and received >= requests:
            first, _ = await asyncio.to_thread(receivers.collect)
            if len(first) >= requests:
                break
        await asyncio.sleep(POLL_SECONDS)
    storm_end = time.time()
    cpu = {p.name: round(p.cpu_seconds() - cpu_before[p.name], 1) for p in processes}
    stop.set()
    await load_task
    first, repeats = await asyncio.to_thread(receivers.collect)
    expired = await counts.count("expired")
    all_received_at = max(first.values()) if len(first) >= requests else None
    before = [c for c in load.calls if c.started < instant]
    during = [c for c in load.calls if instant <= c.started <= storm_end]
    return {
        "requests": requests,
        "recorded_expired": expired,
        "seconds_to_all_expired": _since(instant, all_expired_at),
        "callbacks_distinct": len(first),
        "callbacks_repeated": repeats,
        "seconds_to_all_callbacks": _since(instant, all_received_at),
        "seconds_to_half_callbacks": (
            round(sorted(first.values())[requests // 2 - 1] - instant, 2)
            if len(first) >= requests // 2
            else None
        ),
        "api_before": latency_summary(before),
        "api_during": latency_summary(during),
        "api_unanswered_after_storm": load.unanswered,
        "cpu_seconds_during": cpu,
        "storm_seconds": round(storm_end - instant, 2),
        # (seconds after the instant, recorded expired, callbacks received): every 5 s,
        # and the last look before the storm was over (or the timeout).
        "progress_every_5s": [p for i, p in enumerate(progress) if i % 20 == 0],
        "progress_at_end": progress[-1] if progress else None,
        "callbacks_per_second": round(len(first) / max(0.01, storm_end - instant), 1),
    }


def _since(instant: float, at: float | None) -> float | None:
    return None if at is None else round(at - instant, 2)


# ---- one database ----


@contextlib.contextmanager
def fresh_database(target: str, postgres_url: str, workdir: Path) -> Iterator[str]:
    if target == "sqlite":
        yield f"sqlite:///{workdir / 'signoff.db'}"
        return
    check_postgres(postgres_url)
    with postgres_database(postgres_url) as url:
        yield url


def _org(env: dict[str, str], workdir: Path, name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    org = signoff_cli(env, workdir, "org", "create", name, "--json")
    user = signoff_cli(
        env, workdir, "user", "create", "--org", org["id"], "--email", f"ops@{name}.example",
        "--name", f"{name} ops", "--role", "admin", "--json",
    )  # fmt: skip
    connection = signoff_cli(
        env, workdir, "connection", "create", "--org", org["id"], "--owner", user["id"],
        "--name", name, "--rate-limit", str(RATE_LIMIT_CEILING), "--json",
    )  # fmt: skip
    return org, connection


def _processes(target: str, env: dict[str, str], workdir: Path, workers: int) -> list[Server]:
    """Each database's documented deployment: one ``serve`` on SQLite; on PostgreSQL an
    API replica without a worker and ``workers`` ``signoff worker`` processes
    (docs/scale-out.md)."""
    if target == "sqlite":
        return [Server("serve", [str(SIGNOFF), "serve"], env, workdir)]
    api = Server("serve", [str(SIGNOFF), "serve", "--no-worker"], env, workdir)
    names = ["worker"] if workers == 1 else [f"worker{i + 1}" for i in range(workers)]
    return [api, *(WorkerProcess(name, env, workdir) for name in names)]


def bench_database(target: str, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    from signoff.crypto import generate_secret_key
    from signoff.storage.asyncpg_connections import asyncpg_dsn

    workdir.mkdir()
    report: dict[str, Any] = {"target": target}
    receivers = ReceiverFleet(args.receivers)
    try:
        with fresh_database(target, args.postgres_url, workdir) as url:
            env = bench_env(url, generate_secret_key())
            env["SIGNOFF_LOG_LEVEL"] = "warning"
            # The servers run this checkout's code, whatever the interpreter has installed.
            env["PYTHONPATH"] = os.pathsep.join(
                [str(REPO_DIR / "src"), *filter(None, [os.environ.get("PYTHONPATH")])]
            )
            signoff_cli(env, workdir, "db", "upgrade")
            storm_org, storm_connection = _org(env, workdir, "storm")
            _, other_connection = _org(env, workdir, "other")
            log(f"[{target}] seeding {args.requests:,} pending requests directly")
            started = time.monotonic()
            # The instant is set once seeding is done: a fixed lead from there.
            placeholder = datetime.now(UTC) + timedelta(days=1)
            rows = storm_rows(
                uuid.UUID(storm_org["id"]),
                uuid.UUID(storm_connection["id"]),
                args.requests,
                receivers.url,
                placeholder,
            )
            if target == "sqlite":
                seed_sqlite(workdir / "signoff.db", rows)
            else:
                asyncio.run(seed_postgres(asyncpg_dsn(url), rows))
            instant = time.time() + args.lead
            asyncio.run(_set_instant(target, url, workdir, instant))
            report["seed_seconds"] = round(time.monotonic() - started, 1)
            report["instant"] = datetime.fromtimestamp(instant, UTC).isoformat()
            log(
                f"[{target}] seeded in {report['seed_seconds']} s; all expire at "
                f"{report['instant']}, {instant - time.time():.1f} s from now"
            )
            processes = _processes(target, env, workdir, args.workers)
            report["processes"] = [p.name for p in processes]
            with contextlib.ExitStack() as stack:
                for process in processes:
                    if process.port:
                        stack.enter_context(running(process))
                stack.callback(lambda: [p.stop() for p in processes if not p.port])
                left = instant - time.time()
                log(f"[{target}] {' and '.join(report['processes'])} started; {left:.1f} s to go")
                if left < 1:
                    raise BenchError("the server took too long to start: raise --lead")
                load = Load(processes[0].url, other_connection["api_key"], args.api_rate)

                async def storm() -> dict[str, Any]:
                    async with StoredCounts(target, url, storm_org["id"]) as counts:
                        return await watch_storm(
                            instant=instant,
                            requests=args.requests,
                            counts=counts,
                            receivers=receivers,
                            load=load,
                            timeout=args.timeout,
                            processes=processes,
                        )

                report.update(asyncio.run(storm()))
                report["load_average_after"] = round(load_average(), 2)
    finally:
        receivers.close()
    _log_report(report)
    return report


async def _set_instant(target: str, url: str, workdir: Path, instant: float) -> None:
    at = datetime.fromtimestamp(instant, UTC)
    if target == "sqlite":
        db = sqlite3.connect(workdir / "signoff.db", isolation_level=None)
        try:
            # As SQLAlchemy's UTC column type stores it (models.base.UTCDateTime).
            db.execute(
                "UPDATE approval_requests SET expires_at = ? WHERE status = 'pending' "
                "AND expires_at IS NOT NULL",
                (at.strftime("%Y-%m-%d %H:%M:%S.%f"),),
            )
        finally:
            db.close()
        return
    import asyncpg

    from signoff.storage.asyncpg_connections import asyncpg_dsn

    connection = await asyncpg.connect(asyncpg_dsn(url))
    try:
        await connection.execute(
            "UPDATE approval_requests SET expires_at = $1 WHERE status = 'pending' "
            "AND expires_at IS NOT NULL",
            at,
        )
        await connection.execute("VACUUM ANALYZE approval_requests")
    finally:
        await connection.close()


def _log_report(report: dict[str, Any]) -> None:
    target = report["target"]
    during, before = report.get("api_during", {}), report.get("api_before", {})
    log(
        f"[{target}] all recorded expired after {report.get('seconds_to_all_expired')} s "
        f"({report.get('recorded_expired')} expired); callbacks: "
        f"{report.get('callbacks_distinct')} distinct after "
        f"{report.get('seconds_to_all_callbacks')} s, {report.get('callbacks_repeated')} repeated"
    )
    log(
        f"[{target}] other org's API: before p99 {before.get('p99_ms')} ms; during the storm "
        f"p50 {during.get('p50_ms')} ms p99 {during.get('p99_ms')} ms max {during.get('max_ms')}"
        f" ms, {during.get('errors')} errors in {during.get('calls')} calls; "
        f"CPU {report.get('cpu_seconds_during')}"
    )


def _commit() -> str:
    result = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        cwd=REPO_DIR,
        capture_output=True,
        text=True,
        check=False,
    )
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"],
        cwd=REPO_DIR,
        capture_output=True,
        text=True,
        check=False,
    )
    return result.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make bench-expiry", description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--databases", default="sqlite,postgresql")
    parser.add_argument("--lead", type=float, default=15.0, help="seconds from seeded to expiry")
    parser.add_argument("--api-rate", type=float, default=100.0, help="other org's calls/s")
    parser.add_argument("--timeout", type=float, default=240.0, help="seconds after the instant")
    parser.add_argument("--receivers", type=int, default=2, help="receiver processes")
    parser.add_argument(
        "--workers", type=int, default=1, help="signoff worker processes (PostgreSQL)"
    )
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get("SIGNOFF_BENCH_POSTGRES_URL", DEFAULT_POSTGRES_URL),
    )
    parser.add_argument("--output", type=Path, default=RESULTS_DIR / "expiry.json")
    args = parser.parse_args(argv)
    databases = [d.strip() for d in args.databases.split(",") if d.strip()]
    result: dict[str, Any] = {
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "commit": _commit(),
        "machine": machine_info(),
        "options": vars(args) | {"output": str(args.output)},
        "reports": [],
    }
    try:
        with tempfile.TemporaryDirectory(prefix="signoff-expiry-") as tmp:
            for target in databases:
                result["reports"].append(bench_database(target, args, Path(tmp) / target))
    except BenchError as exc:
        log(f"error: {exc}")
        return 1
    result["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    for report in result["reports"]:
        report["targets"] = {
            "all_expired_within_60s": (report["seconds_to_all_expired"] or 1e9) <= TARGET_SECONDS,
            "all_callbacks_within_60s": (report["seconds_to_all_callbacks"] or 1e9)
            <= TARGET_SECONDS,
            "api_p99_under_100ms": report["api_during"].get("p99_ms", 1e9) < TARGET_P99_MS,
        }
    print(json.dumps(result["reports"], indent=2))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
