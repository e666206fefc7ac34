"""What the audit sealer costs an event, deterministically enough to compare two builds on
a shared machine: ``python -m bench.seal_cost --events 20000``.

On a fresh SQLite database, one org gets ``--events`` waiting events (as a create's
writes them), then ``sealing.seal_org_now`` chains them all, as the worker's loop does.
Printed: process CPU per sealed event (the lowest of ``--rounds``, GC frozen: the other
sessions' load only ever adds), statements run (by kind) per batch, and the CPU spent in
each step (the repository's queries, the canonical form, the hash), measured by wrapping
those functions, so the parts add up to a little more than the whole. Also the CPU of the
events' inserts themselves with migration 0044's ``audit_events`` insert trigger (which
0055 dropped on SQLite) and without it (plain ``sqlite3``, one event a statement, as a
create writes them). Then the worker's re-check of the sealed chain
(``sealing.verify_once``): its CPU per re-checked event, statements, and steps likewise.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import gc
import inspect
import json
import shutil
import sqlite3
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any, cast

from sqlalchemy import Table, event, insert

from signoff.audit import chain, repository, sealing, service
from signoff.common.time import utcnow
from signoff.config import Settings
from signoff.context import AppContext
from signoff.crypto import generate_secret_key
from signoff.migrations import upgrade_to_head
from signoff.models import AuditEvent, Organization
from signoff.wiring import Wiring

EVENTS = cast(Table, AuditEvent.__table__)
ORGS = cast(Table, Organization.__table__)
INSERT_CHUNK = 2000


def _event_rows(org_id: uuid.UUID, count: int, start: int = 0) -> list[dict[str, Any]]:
    """Events like a create's: a request's id, an actor, a small data object."""
    now = utcnow()
    return [
        {
            "id": uuid.uuid4(),
            "org_id": org_id,
            "request_id": None,
            "type": "request.created",
            "actor_id": uuid.uuid4(),
            "data": {"title": f"Deploy {n}", "action": "deploy", "risk": "low", "n": n},
            "created_at": now + timedelta(microseconds=n),
        }
        for n in range(start, start + count)
    ]


@contextmanager
def executions(ctx: AppContext) -> Iterator[list[str]]:
    """Each statement run on the write or read engine, once per row of an executemany
    (tests/audit/test_sealer_cost.py counts them too)."""
    seen: list[str] = []

    def counted(_c: Any, _cur: Any, statement: str, parameters: Any, _x: Any, many: bool) -> None:
        seen.extend([statement] * (len(parameters) if many else 1))

    engines = {ctx.db.write_engine.sync_engine, ctx.db.read_engine.sync_engine}
    for engine in engines:
        event.listen(engine, "before_cursor_execute", counted)
    try:
        yield seen
    finally:
        for engine in engines:
            event.remove(engine, "before_cursor_execute", counted)


@contextmanager
def _steps(spent: Counter[str]) -> Iterator[None]:
    """Each repository query, the canonical form and the hash timed in process CPU."""
    targets: list[tuple[Any, str]] = [
        (repository, name)
        for name, value in vars(repository).items()
        if inspect.iscoroutinefunction(value) and value.__module__ == repository.__name__
    ]
    targets += [(service, name) for name in ("_canonical", "canonical_row", "event_hash")]
    saved = [(owner, name, getattr(owner, name)) for owner, name in targets if hasattr(owner, name)]
    for owner, name, original in saved:
        setattr(owner, name, _timed(original, name, spent))
    try:
        yield
    finally:
        for owner, name, original in saved:
            setattr(owner, name, original)


def _timed(function: Callable[..., Any], name: str, spent: Counter[str]) -> Callable[..., Any]:
    if inspect.iscoroutinefunction(function):

        @functools.wraps(function)
        async def waited(*args: Any, **kwargs: Any) -> Any:
            began = time.process_time()
            try:
                return await function(*args, **kwargs)
            finally:
                spent[name] += time.process_time() - began

        return waited

    @functools.wraps(function)
    def called(*args: Any, **kwargs: Any) -> Any:
        began = time.process_time()
        try:
            return function(*args, **kwargs)
        finally:
            spent[name] += time.process_time() - began

    return called


async def _fill(wiring: Wiring, count: int) -> uuid.UUID:
    org_id = uuid.uuid4()
    async with wiring.ctx.db.write_transaction() as session:
        await session.execute(insert(ORGS), {"id": org_id, "name": "Sealed"})
    for start in range(0, count, INSERT_CHUNK):
        rows = _event_rows(org_id, min(INSERT_CHUNK, count - start), start)
        async with wiring.ctx.db.write_transaction() as session:
            await session.execute(insert(EVENTS), rows)
    return org_id


async def _seal_round(path: Path, count: int, breakdown: bool) -> dict[str, Any]:
    settings = Settings(
        database_url=f"sqlite+aiosqlite:///{path}", secret_key=generate_secret_key(), redis_url=None
    )
    wiring = Wiring.from_settings(settings)
    try:
        org_id = await _fill(wiring, count)
        await wiring.ctx.keys.ready()
        spent: Counter[str] = Counter()
        gc.collect()
        gc.freeze()
        with executions(wiring.ctx) as seen, _steps(spent) if breakdown else _nothing():
            began = time.process_time()
            sealed = await sealing.seal_org_now(wiring.ctx, org_id, checkpoint=False)
            cpu = time.process_time() - began
        gc.unfreeze()
        assert sealed == count, (sealed, count)
        kinds = Counter(statement.split(None, 1)[0].upper() for statement in seen)
        # Batches sealed: one head update each.
        batches = sum(statement.startswith("UPDATE audit_chain_heads") for statement in seen)
        recheck = await _recheck(wiring.ctx, count, breakdown)
        return {
            "cpu": cpu,
            "statements": dict(kinds),
            "steps": dict(spent),
            "batches": batches,
            "recheck": recheck,
        }
    finally:
        await wiring.close()


async def _recheck(ctx: AppContext, count: int, breakdown: bool) -> dict[str, Any]:
    """The worker's re-check of the ``count`` events just sealed, timed as the sealing is."""
    spent: Counter[str] = Counter()
    gc.collect()
    gc.freeze()
    try:
        with executions(ctx) as seen, _steps(spent) if breakdown else _nothing():
            began = time.process_time()
            checked = await sealing.verify_once(ctx)
            cpu = time.process_time() - began
    finally:
        gc.unfreeze()
    assert checked == count, (checked, count)
    kinds = Counter(statement.split(None, 1)[0].upper() for statement in seen)
    return {"cpu": cpu, "statements": dict(kinds), "steps": dict(spent)}


@contextmanager
def _nothing() -> Iterator[None]:
    yield


def _trigger_cost(template: Path, count: int) -> dict[str, float]:
    """µs of CPU an event insert takes with the insert trigger and without it."""
    figures: dict[str, float] = {}
    for label, trigger in (("with_trigger", True), ("without_trigger", False)):
        best = float("inf")
        for _ in range(3):
            with tempfile.TemporaryDirectory() as scratch:
                copy = Path(scratch) / "t.db"
                shutil.copyfile(template, copy)
                best = min(best, _insert_cpu(copy, count, trigger))
        figures[label] = round(best / count * 1e6, 2)
    return figures


# Migration 0044's trigger, which 0055 dropped on SQLite: what an insert paid for it.
_UNSEALED_TRIGGER = (
    "CREATE TRIGGER IF NOT EXISTS audit_events_unsealed AFTER INSERT ON audit_events BEGIN "
    "INSERT INTO audit_unsealed (org_id, event_id) VALUES (NEW.org_id, NEW.id); END"
)


def _insert_cpu(path: Path, count: int, trigger: bool) -> float:
    connection = sqlite3.connect(path, isolation_level=None)
    connection.execute("PRAGMA journal_mode=WAL")
    connection.execute("PRAGMA synchronous=NORMAL")
    connection.execute("PRAGMA foreign_keys=ON")
    if trigger:
        connection.execute(_UNSEALED_TRIGGER)
    org = uuid.uuid4().hex
    connection.execute(
        "INSERT INTO organizations (id, name, emergency_stop, created_at) VALUES (?, 'x', 0, '')",
        (org,),
    )
    rows = [
        (uuid.uuid4().hex, org, "request.created", uuid.uuid4().hex, json.dumps({"n": n}), str(n))
        for n in range(count)
    ]
    statement = (
        "INSERT INTO audit_events (id, org_id, type, actor_id, data, created_at) "
        "VALUES (?, ?, ?, ?, ?, ?)"
    )
    connection.execute("BEGIN")
    began = time.process_time()
    for row in rows:
        connection.execute(statement, row)
    cpu = time.process_time() - began
    connection.execute("COMMIT")
    connection.close()
    return cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None, help="write the figures as JSON")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        template = Path(scratch) / "template.db"
        upgrade_to_head(f"sqlite+aiosqlite:///{template}")
        rounds = []
        for number in range(args.rounds + 1):
            copy = Path(scratch) / f"round{number}.db"
            shutil.copyfile(template, copy)
            # The last round with each step timed (its total is not counted).
            rounds.append(asyncio.run(_seal_round(copy, args.events, number == args.rounds)))
            copy.unlink()
        trigger = _trigger_cost(template, args.events)
    timed, plain = rounds[-1], rounds[:-1]
    batches = max(1, timed["batches"])
    result = {
        "events": args.events,
        "cpu_us_per_event": [round(r["cpu"] / args.events * 1e6, 2) for r in plain],
        "best_cpu_us_per_event": round(min(r["cpu"] for r in plain) / args.events * 1e6, 2),
        "statements": timed["statements"],
        "statements_per_batch": round(sum(timed["statements"].values()) / batches, 1),
        "steps_us_per_event": {
            name: round(value / args.events * 1e6, 2)
            for name, value in sorted(timed["steps"].items(), key=lambda kv: -kv[1])
        },
        "insert_us_per_event": trigger,
        "recheck_cpu_us_per_event": [
            round(r["recheck"]["cpu"] / args.events * 1e6, 2) for r in plain
        ],
        "recheck_best_cpu_us_per_event": round(
            min(r["recheck"]["cpu"] for r in plain) / args.events * 1e6, 2
        ),
        "recheck_statements": timed["recheck"]["statements"],
        "recheck_steps_us_per_event": {
            name: round(value / args.events * 1e6, 2)
            for name, value in sorted(timed["recheck"]["steps"].items(), key=lambda kv: -kv[1])
        },
        "chain_module": chain.__name__,
    }
    print(json.dumps(result, indent=2))
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
