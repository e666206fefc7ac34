"""PostgreSQL: planning a request's notifications share-locks the request only when it
writes notifications for it, and then only for the end of its transaction. A decision
on a request whose plans notify nobody (no rule matches) never waits for the planner."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg  # type: ignore[import-untyped]
import httpx
import pytest

from signoff.common.poison import PoisonedRows
from signoff.common.time import utcnow
from signoff.context import AppContext
from signoff.notifications import service
from signoff.notifications.repository import NotificationRepository
from signoff.notifications.sender import PLAN_LIMIT
from signoff.storage.asyncpg_shape import asyncpg_dsn
from tests.conftest import Org, create_approval
from tests.notifications.test_flow import put_routing, routing

NOWHERE = "http://127.0.0.1:9/hook"  # nothing is sent: the planning is never committed


@asynccontextmanager
async def planning_not_committed(ctx: AppContext) -> AsyncIterator[int]:
    """The waiting plans planned in a transaction left open while the block runs."""
    async with ctx.db.write_transaction() as session:
        repo = NotificationRepository(session, ctx.db.dialect)
        yield await service.plan_waiting(repo, utcnow(), PLAN_LIMIT, PoisonedRows())


async def a_decision_may_lock(ctx: AppContext, request_id: str) -> bool:
    """Whether a decision's write could lock the request now, without waiting."""
    connection = await asyncpg.connect(asyncpg_dsn(ctx.settings.database_url))
    try:
        async with connection.transaction():
            await connection.execute(
                "SELECT 1 FROM approval_requests WHERE id = $1 FOR NO KEY UPDATE NOWAIT",
                uuid.UUID(request_id),
            )
        return True
    except asyncpg.LockNotAvailableError:
        return False
    finally:
        await connection.close()


# On SQLite the planning holds the writer: there are no row locks.
@pytest.mark.usefixtures("postgres_only")
@pytest.mark.parametrize("matched", [False, True], ids=["no-rule-matches", "a-rule-matches"])
async def test_the_planner_locks_only_requests_it_notifies_about(
    client: httpx.AsyncClient, org: Org, ctx: AppContext, matched: bool
) -> None:
    await put_routing(client, org, routing(NOWHERE, NOWHERE, NOWHERE))
    created = await create_approval(
        client,
        org.member,
        action_type="deploy.production" if matched else "refund.issue",
        priority="high",
    )
    async with planning_not_committed(ctx) as planned:
        assert planned >= 1
        assert await a_decision_may_lock(ctx, created["id"]) is not matched
