"""A change writes its notification plan row only where its org can notify anyone (it has
a channel: ``notifications/planning/repository.can_notify``), decided by the writing statement;
and the notification workers are woken after its commit only if it wrote one. A request
is planned under the routing in force when it was created, or its step opened."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select

from signoff.common.poison import PoisonedRows
from signoff.common.time import utcnow
from signoff.config import Settings
from signoff.context import AppContext
from signoff.models.notifications import NotificationPlan
from signoff.notifications.planning import service
from signoff.notifications.planning.repository import NOTIFY_CHANNEL as PLAN_CHANNEL
from signoff.notifications.repository import NotificationRepository
from signoff.notifications.sending.sender import PLAN_LIMIT
from signoff.storage import Notifier
from signoff.wiring import Wiring
from tests.conftest import Org, create_approval, eventually
from tests.notifications.support import CHANNEL_MATCHING_NOTHING, MailBox
from tests.notifications.test_flow import put_routing
from tests.steps.test_steps import set_chain, vote
from tests.storage.listen import heard


async def plan_rows(ctx: AppContext, request_id: str) -> int:
    async with ctx.reading() as uow:
        count = await uow.session.scalar(
            select(func.count())
            .select_from(NotificationPlan)
            .where(NotificationPlan.request_id == uuid.UUID(request_id))
        )
    return int(count or 0)


def plan_wakeups_sent(ctx: AppContext, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """PostgreSQL: the plan notifications the process asks its ``Notifier`` to send to the
    other processes after its commits."""
    sent: list[str] = []
    send = Notifier.send

    def recorded(self: Notifier, channel: str, payload: str = "") -> None:
        if channel == PLAN_CHANNEL:
            sent.append(channel)
        send(self, channel, payload)

    monkeypatch.setattr(Notifier, "send", recorded)
    return sent


@pytest.mark.parametrize("routed", [False, True], ids=["no-channel", "a-channel"])
async def test_a_chain_writes_plans_and_wakes_workers_only_where_routing_can_send(
    api: httpx.AsyncClient,
    ctx: AppContext,
    wiring: Wiring,
    org: Org,
    settings: Settings,
    backend: str,
    monkeypatch: pytest.MonkeyPatch,
    routed: bool,
) -> None:
    if routed:
        await put_routing(api, org, CHANNEL_MATCHING_NOTHING)
    first, second, third = org.members
    sent = plan_wakeups_sent(ctx, monkeypatch)
    request: dict[str, Any] = {}
    steps: list[dict[str, Any]] = []

    async def create() -> None:
        request.update(await create_approval(api, org.admin, is_sequential=True))

    async def configure() -> None:
        steps[:] = await set_chain(api, org.admin, request["id"], [first, second, third])

    def voter(who: Any, index: int, status: str) -> Callable[[], Awaitable[None]]:
        async def cast() -> None:
            answer = await vote(api, who, request["id"], steps[index]["id"])
            assert answer.json()["request_status"] == status, answer.text

        return cast

    # Each change, and whether it opens something to notify about: the create, the
    # chain's configuration (its first step), the chain replaced before any vote (on
    # PostgreSQL under the lock, in the session's transaction, whose plan trigger fires
    # by itself: migration 0020), the votes that open the next steps, the last vote.
    changes = [
        (create, True),
        (configure, True),
        (configure, True),
        (voter(first, 0, "pending"), True),
        (voter(second, 1, "pending"), True),
        (voter(third, 2, "approved"), False),
    ]
    written = 0
    async with heard(settings, PLAN_CHANNEL) if backend == "postgres" else _nothing() as told:
        for change, opens in changes:
            wiring.notifications.wakeup.clear()
            heard_before = len(told)
            await change()
            planned = routed and opens
            written += planned
            assert await plan_rows(ctx, request["id"]) == written
            assert wiring.notifications.wakeup.is_set() is planned
            if backend == "postgres" and planned:
                await eventually(
                    lambda before=heard_before: len(told) > before, "the plan's notification"
                )
        if backend == "postgres" and not routed:
            assert sent == []  # asked of the Notifier as each change committed
            await told.everything_sent_so_far(ctx.notifier)
            assert told == []  # neither by the process nor by a trigger
    # The worker's planning transaction finds nothing to plan for a quiet org.
    async with ctx.db.write_transaction() as session:
        repo = NotificationRepository(session, ctx.db.dialect)
        taken = await service.plan_waiting(repo, utcnow(), PLAN_LIMIT, PoisonedRows())
    assert taken == (5 if routed else 0)


class _nothing:
    """``heard``'s stand-in on SQLite: no LISTEN, nothing heard."""

    async def __aenter__(self) -> list[str]:
        return []

    async def __aexit__(self, *_exc: object) -> None:
        return None


async def test_routing_saved_later_applies_to_what_is_created_or_opened_after_it(
    api: httpx.AsyncClient, ctx: AppContext, wiring: Wiring, org: Org, mailbox: MailBox
) -> None:
    before = await create_approval(api, org.admin, is_sequential=True)
    assert await plan_rows(ctx, before["id"]) == 0
    await put_routing(
        api,
        org,
        {"channels": {"mail": {"type": "email"}}, "rules": [{"channels": ["mail"]}]},
    )
    after = await create_approval(api, org.admin, is_sequential=True)
    await wiring.notifications.run_once()

    async def kinds(request: dict[str, Any]) -> list[str]:
        log = await api.get(
            f"/api/v1/approvals/{request['id']}/notifications", headers=org.admin.headers
        )
        assert log.status_code == 200, log.text
        return sorted({row["kind"] for row in log.json()["data"]})

    # Created before the routing: its create is not planned under rules it predates.
    assert await kinds(before) == []
    assert await kinds(after) == ["created"]
    # Its step opened after the routing was saved: that is planned, and sent.
    await set_chain(api, org.admin, before["id"], [org.member])
    await wiring.notifications.run_once()
    assert await kinds(before) == ["step_opened"]
    assert any(mail.recipients == [org.member.email] for mail in mailbox.mails)
