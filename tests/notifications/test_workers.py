"""Notification senders as real ``signoff worker`` processes: a worker killed between
claiming and recording (and one killed before planning a create), and two workers
competing on PostgreSQL, for the planning of creates and for the sends."""

from __future__ import annotations

import asyncio
import signal
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from bench.receiver import Received, Receiver, Reply
from sqlalchemy import func, select

from signoff.app import create_app
from signoff.context import AppContext
from signoff.models import Notification, NotificationAttempt, NotificationPlan
from signoff.wiring import Wiring
from tests.conftest import Org, create_approval
from tests.webhooks.test_workers import worker_process

pytestmark = pytest.mark.anyio

WEBHOOK_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"  # the Standard Webhooks example

SENDER_SETTINGS = {
    "notification_lease_seconds": 3.0,
    "notification_timeout_seconds": 2.0,
    "notification_poll_interval_seconds": 0.2,
}


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    return {}


@asynccontextmanager
async def api_without_worker(wiring: Wiring) -> AsyncIterator[httpx.AsyncClient]:
    """Only the worker processes send (like ``serve --no-worker``)."""
    application = create_app(wiring.ctx.settings, wiring=wiring, background=False)
    async with application.router.lifespan_context(application):
        transport = httpx.ASGITransport(app=application)
        async with httpx.AsyncClient(transport=transport, base_url="http://signoff.test") as c:
            yield c


async def route_to_webhook(api: httpx.AsyncClient, org: Org, url: str) -> None:
    document = {
        "channels": {"events": {"type": "webhook", "url": url, "secret": WEBHOOK_SECRET}},
        "rules": [{"channels": ["events"]}],
    }
    response = await api.put("/api/v1/routing", json=document, headers=org.admin.headers)
    assert response.status_code == 200, response.text


async def statuses(ctx: AppContext) -> dict[str, int]:
    async with ctx.reading() as uow:
        rows = await uow.session.execute(
            select(Notification.status, func.count()).group_by(Notification.status)
        )
        return {status: count for status, count in rows.all()}


async def wait_until_sent(ctx: AppContext, count: int, timeout: float = 20.0) -> None:
    """Records follow the POSTs (another process writes them): poll, with a deadline."""
    async with asyncio.timeout(timeout):
        while (await statuses(ctx)).get("sent") != count:  # noqa: ASYNC110
            await asyncio.sleep(0.05)


async def plans_waiting(ctx: AppContext) -> int:
    async with ctx.reading() as uow:
        return int(await uow.session.scalar(select(func.count()).select_from(NotificationPlan)))


async def test_a_worker_killed_mid_send_or_before_planning_is_finished_by_another(
    ctx: AppContext, wiring: Wiring, org: Org, database_url: str, tmp_path: Path
) -> None:
    """Worker A plans the first request and dies mid-send; the second request is created
    while A is stuck in that send and dies before planning it. Worker B plans the second
    and sends both: the first at most once more, the second once."""

    def script(request: Received) -> Reply:
        if len(receiver.received) == 1:
            return Reply(hang=True)  # worker A's send: A dies holding the claim
        return Reply(200)

    async with Receiver(script=script) as receiver, api_without_worker(wiring) as api:
        await route_to_webhook(api, org, receiver.url)
        await create_approval(api, org.member)  # only a plan is written: nothing to send yet
        assert await statuses(ctx) == {} and await plans_waiting(ctx) == 1
        async with worker_process(database_url, tmp_path / "a.log", **SENDER_SETTINGS) as a:
            await receiver.wait_for(1, timeout=20)  # A planned, claimed and is mid-POST
            second = await create_approval(api, org.member)  # A is busy: not planned
            a.kill()  # SIGKILL: no cleanup, the claim stays behind
            await a.wait()
        assert await plans_waiting(ctx) == 1
        assert await statuses(ctx) == {"pending": 1}  # the first's, claimed by A
        async with worker_process(database_url, tmp_path / "b.log", **SENDER_SETTINGS):
            await receiver.wait_for(3, timeout=20)
            await wait_until_sent(ctx, 2)
    assert a.returncode == -signal.SIGKILL
    by_id: dict[str, list[Received]] = {}
    for call in receiver.received:
        by_id.setdefault(call.headers["webhook-id"], []).append(call)
    # The first event twice (once lost with A; receivers deduplicate on webhook-id), the
    # second once, planned by B.
    assert sorted(len(calls) for calls in by_id.values()) == [1, 2]
    first = next(calls for calls in by_id.values() if len(calls) == 2)
    assert first[1].at - first[0].at >= SENDER_SETTINGS["notification_lease_seconds"] - 0.3
    [once] = [calls[0] for calls in by_id.values() if len(calls) == 1]
    assert orjson.loads(once.body)["data"]["request_id"] == second["id"]
    assert await statuses(ctx) == {"sent": 2} and await plans_waiting(ctx) == 0


# Competing workers are a PostgreSQL deployment (SKIP LOCKED claims).
@pytest.mark.parametrize("test_database", ["postgres"], indirect=True)
async def test_two_workers_send_each_notification_exactly_once(
    ctx: AppContext, wiring: Wiring, org: Org, database_url: str, tmp_path: Path
) -> None:
    total = 300
    spec = {**SENDER_SETTINGS, "notification_lease_seconds": 30.0}
    async with Receiver() as receiver, api_without_worker(wiring) as api:
        await route_to_webhook(api, org, receiver.url)
        async with (
            worker_process(database_url, tmp_path / "a.log", **spec),
            worker_process(database_url, tmp_path / "b.log", **spec),
        ):
            for _ in range(total):
                await create_approval(api, org.member)
            await receiver.wait_for(total, timeout=60)
            await wait_until_sent(ctx, total)
        logs = [(tmp_path / name).read_text() for name in ("a.log", "b.log")]
    received = Counter(r.headers["webhook-id"] for r in receiver.received)
    assert len(received) == total
    assert not [i for i, n in received.items() if n > 1], logs
    async with ctx.reading() as uow:
        attempts = await uow.session.scalar(select(func.count()).select_from(NotificationAttempt))
        planned = await uow.session.scalar(select(func.count()).select_from(Notification))
    assert attempts == total
    # Each create was planned by exactly one of the two workers.
    assert planned == total and await plans_waiting(ctx) == 0
