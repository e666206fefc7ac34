"""PostgreSQL: planning a request's notifications share-locks the request only when it
writes notifications for it, and then only for the end of its transaction. A decision
on a request whose plans notify nobody (no rule matches) never waits for the planner.

A decision that does wait for the planning lets none of the reminders it planned out, on
either database (the last test)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg  # type: ignore[import-untyped]
import httpx
import orjson
import pytest
from bench.receiver import Receiver
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from signoff.common.poison import PoisonedRows
from signoff.common.time import utcnow
from signoff.context import AppContext
from signoff.notifications.planning import service
from signoff.notifications.repository import NotificationRepository
from signoff.notifications.sending.messages import KIND_HEADLINES
from signoff.notifications.sending.sender import PLAN_LIMIT
from signoff.storage.asyncpg_connections import asyncpg_dsn
from signoff.wiring import Wiring
from tests.conftest import Org, create_approval, eventually
from tests.notifications.support import MailBox
from tests.notifications.test_flow import put_routing, routing
from tests.notifications.test_schedule import Clock

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


EVENTS_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
DECIDED, WAITING = "Decided while planned", "Still waiting"
SCHEDULED = {"reminder", "escalated"}


def reminding(events_url: str) -> dict[str, Any]:
    """Mail to a member and signed webhook events, two reminders and an escalation."""
    return {
        "channels": {
            "mail": {"type": "email"},
            "events": {"type": "webhook", "url": events_url, "secret": EVENTS_SECRET},
        },
        "rules": [
            {
                "channels": ["mail", "events"],
                "audience": {"users": ["member1@acme.example"]},
                "reminders": {"after_minutes": 30, "times": 2},
                "escalation": {"after_minutes": 90, "audience": "admins"},
            }
        ],
    }


def messages_sent(mailbox: MailBox, events: Receiver) -> list[tuple[str, str, str]]:
    """(request title, mail recipient or "events", kind) of every message sent, sorted."""
    kinds = {headline: kind for kind, headline in KIND_HEADLINES.items()}
    sent = []
    for mail in mailbox.mails:
        # "[priority] headline: title"
        headline, title = str(mail.message["Subject"]).split("] ", 1)[1].rsplit(": ", 1)
        sent += [(title, mail.recipients[0], kinds[headline])]
    for call in events.received:
        data = orjson.loads(call.body)["data"]
        sent += [(data["title"], "events", data["kind"])]
    return sorted(sent)


async def scheduled_rows(
    api: httpx.AsyncClient, org: Org, request_id: str
) -> list[tuple[str, str, str | None]]:
    """(kind, status, error) of the request's reminder and escalation rows, sorted."""
    log = await api.get(f"/api/v1/approvals/{request_id}/notifications", headers=org.admin.headers)
    assert log.status_code == 200, log.text
    rows = log.json()["data"]
    return sorted((r["kind"], r["status"], r["error"]) for r in rows if r["kind"] in SCHEDULED)


def each_scheduled_row(status: str, error: str | None) -> list[tuple[str, str, str | None]]:
    """Mail and event rows alike: two reminders and an escalation each."""
    return sorted([("reminder", status, error)] * 4 + [("escalated", status, error)] * 2)


async def until_it_waits_for(
    ctx: AppContext, planning: AsyncSession, decision: asyncio.Future[Any]
) -> None:
    """Until ``decision`` waits for the ``planning`` transaction, left open: on PostgreSQL
    its write waits for the planning's share lock on the request; on SQLite it waits for
    the planning's turn at the writer (``GroupCommit``). Bounded (``eventually``)."""
    if ctx.db.dialect != "postgresql":
        group = ctx.db.group_commit
        assert group is not None

        def queued() -> bool:
            assert not decision.done(), "the decision did not wait for the planning"
            return group._queued > 0

        await eventually(queued, "the decision to queue behind the planning")
        return
    pid = await planning.scalar(text("SELECT pg_backend_pid()"))
    watcher = await asyncpg.connect(asyncpg_dsn(ctx.settings.database_url))

    async def blocked() -> bool:
        assert not decision.done(), "the decision did not wait for the planning's lock"
        waiting = await watcher.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))", pid
        )
        return bool(waiting)

    try:
        await eventually(blocked, "the decision to wait for the planning's lock")
    finally:
        await watcher.close()


async def test_a_decision_that_waited_for_the_planning_lets_no_reminder_out(
    api: httpx.AsyncClient,
    ctx: AppContext,
    wiring: Wiring,
    org: Org,
    mailbox: MailBox,
    backend: str,
) -> None:
    """A decision made while the planner writes its request's reminders, and waiting for
    that transaction: none of those reminders, nor the escalation, goes out, while a
    request of the same org left undecided gets all of its own.

    On PostgreSQL the decision (without a lock: one statement) voids what is scheduled as
    of its statement's snapshot, taken before it waited, and so misses the rows the
    planning wrote; the sender's check at claim time (the request is no longer pending)
    voids them. On SQLite the decision joins the planning's transaction after it, and
    voids them itself."""
    clock = Clock()
    wiring.notifications.clock = clock
    async with Receiver() as events:
        await put_routing(api, org, reminding(events.url))
        decided = await create_approval(api, org.member, title=DECIDED)
        await create_approval(api, org.member, title=WAITING)
        # Bounded: on SQLite the planning's commit waits for the decision that joined it.
        async with asyncio.timeout(20), ctx.db.write_transaction() as planning:
            repo = NotificationRepository(planning, ctx.db.dialect)
            assert await service.plan_waiting(repo, utcnow(), PLAN_LIMIT, PoisonedRows()) == 2
            decision = asyncio.ensure_future(
                api.patch(
                    f"/api/v1/approvals/{decided['id']}",
                    json={"decision": "approve"},
                    headers=org.admin.headers,
                )
            )
            try:
                await until_it_waits_for(ctx, planning, decision)
            except BaseException:
                decision.cancel()
                raise
        response = await asyncio.wait_for(decision, timeout=10)
        assert response.status_code == 200, response.text
        assert response.json()["status"] == "approved"
        # The race as it is: on PostgreSQL the decision did not see the rows. (Should a
        # decision come to void them itself, only this expectation changes.)
        left = ("pending", None) if backend == "postgres" else ("cancelled", "request decided")
        assert await scheduled_rows(api, org, decided["id"]) == each_scheduled_row(*left)

        await asyncio.wait_for(wiring.notifications.run_once(), timeout=10)  # the created ones
        created = messages_sent(mailbox, events)
        assert (WAITING, "member1@acme.example", "created") in created
        clock.advance(100)  # past both reminders (30, 60 min) and the escalation (90)
        await asyncio.wait_for(wiring.notifications.run_once(), timeout=10)
        later = messages_sent(mailbox, events)
        for message in created:
            later.remove(message)

    assert later == sorted(
        [(WAITING, "member1@acme.example", "reminder")] * 2
        + [(WAITING, "admin0@acme.example", "escalated")]
        + [(WAITING, "events", "reminder")] * 2
        + [(WAITING, "events", "escalated")]
    )
    assert not [m for m in created if m[0] == DECIDED and m[2] in SCHEDULED]
    void = "request no longer pending" if backend == "postgres" else "request decided"
    assert await scheduled_rows(api, org, decided["id"]) == each_scheduled_row("cancelled", void)
