"""PostgreSQL: planning a request's notifications share-locks the request only when it
writes notifications for it, and then only for the end of its transaction. A decision
on a request whose plans notify nobody (no rule matches) never waits for the planner."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta

import asyncpg  # type: ignore[import-untyped]
import httpx
import orjson
import pytest
from bench.receiver import Receiver

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
SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


@pytest.fixture(autouse=True)
def _postgres_only(backend: str) -> None:
    if backend != "postgres":
        pytest.skip("SQLite's planning holds the writer: there are no row locks")


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


async def test_no_reminder_goes_out_about_a_decision_that_waited_for_the_planner(
    api: httpx.AsyncClient, org: Org, ctx: AppContext
) -> None:
    # The decision is made without a lock (one statement, ``service._without_lock``) and
    # lands while the planner holds the request share-locked with its reminder written,
    # not yet committed: it waits for the planner, and its snapshot, taken before, does
    # not see that reminder to cancel it. When due, the reminder must still not go out,
    # not even to a webhook channel (which hears of a create after its decision).
    async with Receiver() as hook:
        document = routing(NOWHERE, NOWHERE, NOWHERE, reminders={"after_minutes": 10})
        document["channels"] = {"hook": {"type": "webhook", "url": hook.url, "secret": SECRET}}
        document["rules"][0]["channels"] = ["hook"]
        await put_routing(api, org, document)
        created = await create_approval(
            api, org.member, action_type="deploy.production", priority="high"
        )
        async with planning_not_committed(ctx) as planned:
            assert planned == 1
            decision = asyncio.create_task(
                api.patch(
                    f"/api/v1/approvals/{created['id']}",
                    headers=org.admin.headers,
                    json={"decision": "approve"},
                )
            )
            await asyncio.sleep(0.5)
            assert not decision.done()  # it waits for the planner's lock
        answer = await decision
        assert answer.status_code == 200, answer.text
        # Past the reminder's time: the sender's round sends what is due.
        ctx.notifications.clock = lambda: utcnow() + timedelta(minutes=11)
        await ctx.notifications.run_once()
        events = [orjson.loads(received.body)["type"] for received in hook.received]
    assert events == ["approval.created"]
    log = await api.get(
        f"/api/v1/approvals/{created['id']}/notifications", headers=org.member.headers
    )
    assert {(row["kind"], row["status"]) for row in log.json()["data"]} == {
        ("created", "sent"),
        ("reminder", "cancelled"),
    }
