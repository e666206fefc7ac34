"""Helpers of the audit tests: event rows written straight to ``audit_events``, as a use
case (or someone with write access to the database) would leave them for the sealer, and
what the sealer made of them."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from sqlalchemy import Table, insert, select

from signoff.audit import chain, service
from signoff.audit.sealing import seal_once
from signoff.context import AppContext
from signoff.models import AuditChainLink, AuditEvent
from tests.conftest import create_org

EVENTS = cast(Table, AuditEvent.__table__)
CHAIN = cast(Table, AuditChainLink.__table__)
START = datetime(2026, 11, 1, tzinfo=UTC)


def after_start(seconds: Iterable[int]) -> list[datetime]:
    """A time ``seconds`` after ``START`` for each of them."""
    return [START + timedelta(seconds=at) for at in seconds]


def event_rows(
    org_id: uuid.UUID,
    times: Iterable[datetime],
    *,
    request_id: uuid.UUID | None = None,
    type: str = "org.settings_changed",
    data: Callable[[int], dict[str, Any]] = lambda index: {"n": index},
) -> list[dict[str, Any]]:
    """Rows of the org's events, one stamped at each of ``times``, each with a new id and
    ``data`` of its index."""
    return [
        {
            "id": uuid.uuid4(),
            "org_id": org_id,
            "request_id": request_id,
            "type": type,
            "actor_id": None,
            "data": data(index),
            "created_at": at,
        }
        for index, at in enumerate(times)
    ]


def events_at(org_id: uuid.UUID, seconds: list[int]) -> list[dict[str, Any]]:
    """Events of the org, one at each of ``seconds`` after ``START``."""
    return event_rows(org_id, after_start(seconds))


async def write_events(ctx: AppContext, rows: list[dict[str, Any]]) -> list[uuid.UUID]:
    """The rows inserted in one transaction; their ids."""
    async with ctx.db.write_transaction() as session:
        await session.execute(insert(EVENTS), rows)
    return [row["id"] for row in rows]


async def chained_ids(ctx: AppContext, org_id: uuid.UUID) -> list[uuid.UUID]:
    """The org's chained event ids, by seq."""
    async with ctx.db.read_session() as session:
        statement = select(CHAIN.c.event_id).where(CHAIN.c.org_id == org_id).order_by(CHAIN.c.seq)
        return list((await session.scalars(statement)).all())


async def sealed_org(ctx: AppContext, name: str) -> uuid.UUID:
    """An org whose own setup events are chained already."""
    org_id = uuid.UUID((await create_org(ctx, name, members=1)).id)
    await seal_once(ctx, verify=False)
    return org_id


async def verified(ctx: AppContext, org_id: uuid.UUID) -> chain.VerifyResult:
    """The org's export, as it is now, verified (signatures unchecked)."""
    lines = [json.dumps(r) async for r in service.export_records(ctx.db.read_session, org_id, 1)]
    return chain.verify(chain.parse_lines(lines), None)
