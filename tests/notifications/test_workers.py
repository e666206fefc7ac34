"""Notification senders as real ``signoff worker`` processes: a worker killed between
claiming and recording, and two workers competing on PostgreSQL."""

from __future__ import annotations

import asyncio
import signal
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from bench.receiver import Received, Receiver, Reply
from sqlalchemy import func, select

from signoff.app import create_app
from signoff.context import AppContext
from signoff.models import Notification, NotificationAttempt
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
async def api_without_worker(ctx: AppContext) -> AsyncIterator[httpx.AsyncClient]:
    """Only the worker processes send (like ``serve --no-worker``)."""
    application = create_app(ctx.settings, ctx=ctx, background=False)
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


async def test_a_worker_killed_mid_send_is_finished_by_another_at_most_once_more(
    ctx: AppContext, org: Org, database_url: str, tmp_path: Path
) -> None:
    def script(request: Received) -> Reply:
        if len(receiver.received) == 1:
            return Reply(hang=True)  # worker A's send: A dies holding the claim
        return Reply(200)

    async with Receiver(script=script) as receiver, api_without_worker(ctx) as api:
        await route_to_webhook(api, org, receiver.url)
        await create_approval(api, org.member)  # the notification is written, not sent
        assert await statuses(ctx) == {"pending": 1}
        async with worker_process(database_url, tmp_path / "a.log", **SENDER_SETTINGS) as a:
            await receiver.wait_for(1, timeout=20)  # A claimed it and is mid-POST
            a.kill()  # SIGKILL: no cleanup, the claim stays behind
            await a.wait()
        async with worker_process(database_url, tmp_path / "b.log", **SENDER_SETTINGS):
            sent = await receiver.wait_for(2, timeout=20)
            await wait_until_sent(ctx, 1)
    assert a.returncode == -signal.SIGKILL
    assert len(receiver.received) == 2  # once by A (lost with it), once more by B
    # The same event both times: receivers deduplicate on webhook-id.
    assert sent[0].headers["webhook-id"] == sent[1].headers["webhook-id"]
    assert sent[1].at - sent[0].at >= SENDER_SETTINGS["notification_lease_seconds"] - 0.3
    assert await statuses(ctx) == {"sent": 1}


# Competing workers are a PostgreSQL deployment (SKIP LOCKED claims).
@pytest.mark.parametrize("test_database", ["postgres"], indirect=True)
async def test_two_workers_send_each_notification_exactly_once(
    ctx: AppContext, org: Org, database_url: str, tmp_path: Path
) -> None:
    total = 300
    spec = {**SENDER_SETTINGS, "notification_lease_seconds": 30.0}
    async with Receiver() as receiver, api_without_worker(ctx) as api:
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
    assert attempts == total
