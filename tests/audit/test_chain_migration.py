"""Migration 0044 on a database holding a sealed chain and a waiting event: the chain
moves into audit_chain unchanged, the waiting event is listed in audit_unsealed, and
after sealing it the whole chain exports and verifies, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any, cast

import sqlalchemy as sa
from alembic import command
from sqlalchemy import Table, insert, inspect, select, text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker, create_async_engine

from signoff.audit import chain
from signoff.audit.service import CheckpointPolicy, export_records, seal_org
from signoff.migrations import alembic_config, run_on, upgrade_to_head
from signoff.models import AuditChainHead, AuditChainLink, AuditEvent, AuditUnsealed
from tests.audit.support import after_start, event_rows
from tests.storage.test_migrations import empty_database  # noqa: F401 (the fixture)

EVENTS = cast(Table, AuditEvent.__table__)
ORG = uuid.uuid4()


def _events(count: int) -> list[dict[str, Any]]:
    return event_rows(ORG, after_start(range(count)), data=lambda n: {"n": n, "note": "é"})


def _store_as_0042(connection: Connection) -> list[tuple[uuid.UUID, int, str, str]]:
    """Three events sealed as 0042's sealer stored them (seq, prev_hash, hash on the
    event's row, the org's head at #3) and a fourth still waiting; the links written,
    in seq order."""
    postgres = connection.dialect.name == "postgresql"
    if postgres:  # the org row does not matter here
        connection.execute(text("SET session_replication_role = replica"))
    events = _events(4)
    connection.execute(insert(EVENTS), events)
    seal = text(
        "UPDATE audit_events SET seq = :seq, prev_hash = :prev, hash = :hash WHERE id = :id"
    )
    seal = seal.bindparams(sa.bindparam("id", type_=sa.Uuid()))
    links, prev = [], chain.GENESIS_HASH
    for seq, event in enumerate(events[:3], start=1):
        form = chain.canonical_event(seq=seq, prev_hash=prev, **event)
        digest = chain.event_hash(form)
        connection.execute(seal, {"seq": seq, "prev": prev, "hash": digest, "id": event["id"]})
        links.append((event["id"], seq, prev, digest))
        prev = digest
    heads = cast(Table, AuditChainHead.__table__)
    mark = {"seq": 3, "hash": prev, "checkpoint_seq": 0}
    connection.execute(
        insert(heads).values(org_id=ORG, verified_seq=0, verified_hash=chain.GENESIS_HASH, **mark)
    )
    if postgres:
        connection.execute(text("SET session_replication_role = origin"))
    connection.commit()
    return links


def _after(connection: Connection) -> tuple[list[Any], list[Any], set[str]]:
    links = cast(Table, AuditChainLink.__table__)
    waiting = cast(Table, AuditUnsealed.__table__)
    stored = connection.execute(
        select(links.c.event_id, links.c.seq, links.c.prev_hash, links.c.hash).order_by(links.c.seq)
    ).all()
    listed = connection.execute(select(waiting.c.org_id, waiting.c.event_id)).all()
    columns = {column["name"] for column in inspect(connection).get_columns("audit_events")}
    return [tuple(row) for row in stored], [tuple(row) for row in listed], columns


async def _seal_and_export(url: str) -> list[str]:
    engine = create_async_engine(url)
    sessions = async_sessionmaker(engine, expire_on_commit=False)

    @asynccontextmanager
    async def reading() -> AsyncIterator[AsyncSession]:
        async with sessions() as session:
            yield session

    try:
        async with sessions() as session, session.begin():
            policy = CheckpointPolicy(1000, 3600.0)
            now = datetime.now(UTC)
            await seal_org(session, engine.dialect.name, ORG, None, policy, now)
        return [json.dumps(record) async for record in export_records(reading, ORG, 1)]
    finally:
        await engine.dispose()


def test_the_sealed_chain_moves_across_and_keeps_verifying(
    empty_database: str,  # noqa: F811
) -> None:
    url = empty_database
    command.upgrade(alembic_config(url), "0042")
    links = asyncio.run(run_on(url, _store_as_0042))

    upgrade_to_head(url)
    stored, listed, columns = asyncio.run(run_on(url, _after))
    assert stored == links
    assert len(listed) == 1 and listed[0][0] == ORG
    assert listed[0][1] not in {link[0] for link in links}
    assert not {"seq", "prev_hash", "hash"} & columns

    lines = asyncio.run(_seal_and_export(url))
    result = chain.verify(chain.parse_lines(lines), None)
    assert (result.ok, result.events, result.last_seq) == (True, 4, 4), result.problem
    assert [json.loads(line)["id"] for line in lines[:3]] == [str(link[0]) for link in links]
    # Sealed, the waiting event is off the list and in the chain as #4.
    stored, listed, _ = asyncio.run(run_on(url, _after))
    assert listed == [] and [link[1] for link in stored] == [1, 2, 3, 4]

    command.downgrade(alembic_config(url), "0042")  # the links back onto their events
    assert asyncio.run(run_on(url, _on_events)) == stored


def _on_events(connection: Connection) -> list[Any]:
    columns = select(EVENTS.c.id, *(sa.column(name) for name in ("seq", "prev_hash", "hash")))
    rows = connection.execute(columns.order_by(sa.column("seq"))).all()
    return [tuple(row) for row in rows]
