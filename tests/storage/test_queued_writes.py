"""Queued writes (``storage.prepared.queue_write``): on PostgreSQL a transition's writes go
out together as one statement. Whatever the database, they must behave as if each had run
at once: later statements of the transaction see them, a refused compare-and-set undoes
the transaction, and a savepoint that rolls back takes its queued writes with it."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest

from signoff.approvals.repository import NewEvent
from signoff.common.time import utcnow
from signoff.context import AppContext
from signoff.errors import RequestNotPending
from tests.conftest import Org, create_approval


def _event(org: Org, request_id: uuid.UUID, kind: str) -> NewEvent:
    return NewEvent(
        org_id=uuid.UUID(org.id),
        request_id=request_id,
        type=kind,
        actor_id=None,
        data={"probe": kind},
        created_at=utcnow(),
    )


async def _event_types(ctx: AppContext, request_id: uuid.UUID) -> list[str]:
    async with ctx.reading() as uow:
        return [event.type for event in await uow.approvals.list_events(request_id)]


async def _new_request(client: httpx.AsyncClient, org: Org) -> uuid.UUID:
    created: dict[str, Any] = await create_approval(client, org.member)
    return uuid.UUID(created["id"])


async def test_queued_writes_are_seen_by_the_transaction_and_committed(
    ctx: AppContext, client: httpx.AsyncClient, org: Org
) -> None:
    request_id = await _new_request(client, org)
    async with ctx.transaction() as uow:
        await uow.approvals.add_event(_event(org, request_id, "probe.one"))
        await uow.approvals.add_event(_event(org, request_id, "probe.two"))
        # An ORM read in the same transaction, with nothing flushed by hand.
        seen = [event.type for event in await uow.approvals.list_events(request_id)]
        await uow.approvals.add_event(_event(org, request_id, "probe.three"))
    assert seen == ["request.created", "probe.one", "probe.two"]
    types = await _event_types(ctx, request_id)
    assert types == ["request.created", "probe.one", "probe.two", "probe.three"]


async def test_a_refused_compare_and_set_undoes_the_transaction(
    ctx: AppContext, client: httpx.AsyncClient, org: Org
) -> None:
    request_id = await _new_request(client, org)
    decided = await client.delete(f"/api/v1/approvals/{request_id}", headers=org.member.headers)
    assert decided.status_code == 200
    with pytest.raises(RequestNotPending):
        async with ctx.transaction() as uow:
            await uow.approvals.add_event(_event(org, request_id, "probe.lost"))
            # No longer pending: the compare-and-set changes no row.
            await uow.approvals.update_if_pending(
                request_id, {"status": "approved"}, lambda: RequestNotPending("cancelled")
            )
            await uow.approvals.flush()
    assert "probe.lost" not in await _event_types(ctx, request_id)


async def test_a_savepoint_rolled_back_forgets_its_queued_writes(
    ctx: AppContext, client: httpx.AsyncClient, org: Org
) -> None:
    request_id = await _new_request(client, org)
    async with ctx.transaction() as uow:
        await uow.approvals.add_event(_event(org, request_id, "probe.before"))
        with pytest.raises(RuntimeError):
            async with uow.approvals.savepoint():
                await uow.approvals.add_event(_event(org, request_id, "probe.undone"))
                raise RuntimeError("one bad row")
        async with uow.approvals.savepoint():
            await uow.approvals.add_event(_event(org, request_id, "probe.kept"))
    types = await _event_types(ctx, request_id)
    assert types == ["request.created", "probe.before", "probe.kept"]
