"""SQLite chains events in commit order, found by their rowid past a mark (migration 0055,
decision 0049): no insert trigger, no waiting list; every event chained once, each org's
in the order they were committed, whatever their ``created_at``; rows deleted at the top
(their rowids taken again), a sealer killed mid-batch, a mark read before another sealer
moved it, and an upgrade with events still listed as waiting."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import pytest
from alembic import command
from sqlalchemy import Table, delete, insert, select, text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker, create_async_engine

from signoff.audit import chain, repository, service
from signoff.audit.sealing import checkpoint_policy, seal_once
from signoff.common.poison import PoisonedRows
from signoff.common.time import utcnow
from signoff.context import AppContext
from signoff.migrations import alembic_config, run_on, upgrade_to_head
from signoff.models import AuditChainLink, AuditEvent, AuditUnsealed, Organization
from tests.audit.support import chained_ids, events_at, sealed_org, verified, write_events

EVENTS = cast(Table, AuditEvent.__table__)
CHAIN = cast(Table, AuditChainLink.__table__)
WAITING = cast(Table, AuditUnsealed.__table__)
ORGS = cast(Table, Organization.__table__)


@pytest.fixture
def sqlite_only(backend: str) -> None:
    """PostgreSQL keeps its insert trigger and waiting list (tests/audit/test_chain.py)."""
    if backend != "sqlite":
        pytest.skip("SQLite only")


pytestmark = pytest.mark.usefixtures("sqlite_only")


async def test_events_are_chained_in_commit_order_without_a_trigger(ctx: AppContext) -> None:
    path = ctx.settings.database_url.split(":///", 1)[1]
    with sqlite3.connect(path) as db:
        triggers = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
    assert "audit_events_unsealed" not in triggers
    first, second = await sealed_org(ctx, "First"), await sealed_org(ctx, "Second")
    before = {org: await chained_ids(ctx, org) for org in (first, second)}
    # Committed in this order, each later one stamped earlier: the chain follows commits.
    a1, b1 = await write_events(ctx, events_at(first, [50]) + events_at(second, [40]))
    (a2,) = await write_events(ctx, events_at(first, [30]))
    b2, a3 = await write_events(ctx, events_at(second, [20]) + events_at(first, [10]))
    async with ctx.db.read_session() as session:
        assert (await session.execute(select(WAITING))).first() is None  # nothing listed
    assert await seal_once(ctx, verify=False) == 5
    assert await chained_ids(ctx, first) == [*before[first], a1, a2, a3]
    assert await chained_ids(ctx, second) == [*before[second], b1, b2]
    for org in (first, second):
        result = await verified(ctx, org)
        assert result.ok, result.problem


async def test_rows_deleted_at_the_top_do_not_hide_the_events_that_take_their_rowids(
    ctx: AppContext,
) -> None:
    org = await sealed_org(ctx, "Purged")
    kept = await chained_ids(ctx, org)
    top = await write_events(ctx, events_at(org, [1, 2, 3]))
    await seal_once(ctx, verify=False)
    async with ctx.db.read_session() as session:
        mark = await repository.seal_mark(session)
    # The highest rows go (an org deleted, a purge), and new events take their rowids.
    async with ctx.db.write_transaction() as session:
        await session.execute(delete(EVENTS).where(EVENTS.c.id.in_(top)))
    later = await write_events(ctx, events_at(org, [4, 5]))
    async with ctx.db.read_session() as session:
        rowids = await session.scalars(
            select(text("rowid")).select_from(EVENTS).where(EVENTS.c.id.in_(later))
        )
        assert max(rowids) <= mark.position  # below the mark
    assert await seal_once(ctx, verify=False) == 2
    assert await chained_ids(ctx, org) == [*kept, *later]
    more = await write_events(ctx, events_at(org, [6]))
    assert await seal_once(ctx, verify=False) == 1
    assert await chained_ids(ctx, org) == [*kept, *later, *more]


class Killed(BaseException):
    """The sealer stopped mid-batch (as a cancellation stops it)."""


async def test_a_sealer_killed_mid_batch_commits_nothing(
    ctx: AppContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    org = await sealed_org(ctx, "Killed")
    kept = await chained_ids(ctx, org)
    written = await write_events(ctx, events_at(org, [3, 2, 1]))
    async with ctx.db.read_session() as session:
        mark = await repository.seal_mark(session)

    async def killed(*_: Any, **__: Any) -> None:
        # After the links were appended, before the head; not an ``Exception``, which
        # would hold back the org alone (test_unsealable.py): the sealer is stopped.
        raise Killed

    monkeypatch.setattr(repository, "update_head", killed)
    with pytest.raises(Killed):
        await seal_once(ctx, verify=False)
    monkeypatch.undo()
    async with ctx.db.read_session() as session:
        assert tuple(await repository.seal_mark(session)) == tuple(mark)
    assert await chained_ids(ctx, org) == kept
    assert await seal_once(ctx, verify=False) == 3
    assert await chained_ids(ctx, org) == [*kept, *written]


async def test_a_mark_read_before_another_sealer_moved_it_chains_nothing(
    ctx: AppContext,
) -> None:
    org = await sealed_org(ctx, "Raced")
    written = await write_events(ctx, events_at(org, [1, 2]))
    async with ctx.db.read_session() as session:
        mark = await repository.seal_mark(session)
    assert await seal_once(ctx, verify=False) == 2  # the other sealer
    more = await write_events(ctx, events_at(org, [3]))
    with pytest.raises(service.StaleBatch):
        async with ctx.db.write_transaction() as session:
            await service.seal_in_commit_order(
                session, ctx.db.dialect, None, checkpoint_policy(ctx), utcnow(),
                poisoned=PoisonedRows(), read=(mark.position, mark.event_id),
            )  # fmt: skip
    chained = await chained_ids(ctx, org)
    assert chained[-2:] == written
    assert await seal_once(ctx, verify=False) == 1
    assert await chained_ids(ctx, org) == [*chained, *more]


# ---- the upgrade from 0054, events still listed as waiting ----


@asynccontextmanager
async def _sessions(url: str) -> AsyncIterator[async_sessionmaker[AsyncSession]]:
    engine = create_async_engine(url)
    try:
        yield async_sessionmaker(engine, expire_on_commit=False)
    finally:
        await engine.dispose()


async def _seal_all(url: str, org_id: uuid.UUID) -> tuple[list[uuid.UUID], chain.VerifyResult]:
    """Every event sealed (``seal_in_commit_order``, as the worker does), then the org's
    chained ids by seq and its export verified."""
    async with _sessions(url) as sessions:
        policy = service.CheckpointPolicy(1000, 3600.0)
        poisoned = PoisonedRows()
        while True:
            async with sessions() as session, session.begin():
                now = datetime.now(UTC)
                batch = await service.seal_in_commit_order(
                    session, "sqlite", None, policy, now, poisoned=poisoned
                )
                if not batch.more:
                    break

        @asynccontextmanager
        async def reading() -> AsyncIterator[AsyncSession]:
            async with sessions() as session:
                yield session

        lines = [json.dumps(r) async for r in service.export_records(reading, org_id, 1)]
        async with sessions() as session:
            statement = select(CHAIN.c.event_id).where(CHAIN.c.org_id == org_id)
            chained = list((await session.scalars(statement.order_by(CHAIN.c.seq))).all())
    return chained, chain.verify(chain.parse_lines(lines), None)


def _insert(url: str, rows: list[dict[str, Any]]) -> list[uuid.UUID]:
    def write(connection: Connection) -> None:
        connection.execute(insert(EVENTS), rows)
        connection.commit()

    asyncio.run(run_on(url, write))
    return [row["id"] for row in rows]


def _objects(url: str) -> tuple[set[str], list[str]]:
    """The triggers, and the event ids listed as waiting (as SQLite stores them)."""
    with sqlite3.connect(url.split(":///", 1)[1]) as db:
        triggers = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='trigger'")}
        listed = [r[0] for r in db.execute("SELECT event_id FROM audit_unsealed")]
    return triggers, listed


def test_events_waiting_at_the_upgrade_are_chained_first_in_their_old_order(
    tmp_path: Path,
) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'upgrade.db'}"
    command.upgrade(alembic_config(url), "0054")
    org = uuid.uuid4()

    def add_org(connection: Connection) -> None:
        connection.execute(insert(ORGS), {"id": org, "name": "Upgraded"})
        # Listed, its event deleted with foreign keys off: passed over, as before.
        connection.execute(insert(WAITING), {"org_id": org, "event_id": uuid.uuid4()})
        connection.commit()

    asyncio.run(run_on(url, add_org))
    # Listed by 0044's trigger, committed in an order their times do not follow.
    e1, e2, e3 = _insert(url, events_at(org, [30, 10, 20]))
    assert len(_objects(url)[1]) == 4
    upgrade_to_head(url)
    assert "audit_events_unsealed" not in _objects(url)[0]
    # Written after the upgrade, stamped earlier than all of them: chained after them.
    n1, n2 = _insert(url, events_at(org, [5, 1]))
    chained, result = asyncio.run(_seal_all(url, org))
    assert chained == [e2, e3, e1, n1, n2]  # the old order (created_at), then commits
    assert (result.ok, result.last_seq) == (True, 5), result.problem
    assert len(_objects(url)[1]) == 1  # the row whose event is gone

    # Down again: what is not chained is listed, the trigger is back; and up.
    (n3,) = _insert(url, events_at(org, [0]))
    command.downgrade(alembic_config(url), "0054")
    triggers, listed = _objects(url)
    assert "audit_events_unsealed" in triggers and len(listed) == 2 and n3.hex in listed
    upgrade_to_head(url)
    chained, result = asyncio.run(_seal_all(url, org))
    assert chained == [e2, e3, e1, n1, n2, n3]
    assert (result.ok, result.last_seq) == (True, 6), result.problem
