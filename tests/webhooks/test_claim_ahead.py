"""A delivery worker claims a fast receiver's deliveries ahead of its free slots
(``worker/deliveries.py``): the receiver's cap of attempts at once still holds, every
delivery is made once, and one that waited in the queue so long that its lease could run
out during the attempt is handed back instead of attempted late."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import orjson
import pytest
from bench.receiver import Received, Receiver, Reply
from sqlalchemy import select

from signoff.app import create_app
from signoff.context import AppContext
from signoff.models import WebhookDelivery
from signoff.wiring import Wiring
from signoff.worker.deliveries import DeliveryWorker
from signoff.worker.sweeper import sweep_expired_once
from tests.conftest import Org, create_approval, eventually
from tests.helpers import NO_SWEEP, backdate_expiry

SETTINGS = {
    **NO_SWEEP,
    "delivery_retry_delays_seconds": [0.1, 0.2, 0.4],
    "delivery_timeout_seconds": 2.0,
    # A queued delivery may wait 3.5 - 2.0 - 1.0 = 0.5 s for a slot.
    "delivery_lease_seconds": 3.5,
    "delivery_poll_interval_seconds": 0.2,
}


@pytest.fixture
async def app(ctx: AppContext, wiring: Wiring) -> AsyncIterator[Any]:
    """The API without a worker of its own: the test runs the one worker."""
    application = create_app(ctx.settings, wiring=wiring, background=False)
    async with application.router.lifespan_context(application):
        yield application


@asynccontextmanager
async def running_worker(ctx: AppContext, wiring: Wiring) -> AsyncIterator[DeliveryWorker]:
    worker = DeliveryWorker(ctx, wiring.webhooks, wiring.hub)
    stop = asyncio.Event()
    task = asyncio.create_task(worker.run(stop))
    try:
        yield worker
    finally:
        stop.set()
        await task


async def expire_with_callbacks(
    client: httpx.AsyncClient, org: Org, ctx: AppContext, wiring: Wiring, url: str, count: int
) -> None:
    """``count`` requests expired by the sweep: their callbacks are due for the workers."""
    for _ in range(count):
        created = await create_approval(
            client, org.member, callback_url=url, expires_at="2099-01-01T00:00:00Z"
        )
        await backdate_expiry(ctx, created["id"])
    assert await sweep_expired_once(ctx, wiring.poisoned) == count


async def stored_deliveries(ctx: AppContext) -> list[tuple[str, int]]:
    async with ctx.reading() as uow:
        rows = await uow.session.execute(select(WebhookDelivery.status, WebhookDelivery.attempts))
        return [(status, attempts) for status, attempts in rows.all()]


def request_ids(received: list[Received]) -> list[str]:
    return [str(orjson.loads(r.body)["request_id"]) for r in received]


def most_at_once(received: list[Received], answer_seconds: float) -> int:
    """The most requests the receiver was answering at one time, each taking
    ``answer_seconds`` from its arrival (a slot's next request arrives after that)."""
    times = sorted(r.at for r in received)
    window = answer_seconds * 0.9
    return max(sum(1 for u in times if t - window < u <= t) for t in times)


@pytest.mark.parametrize("settings_overrides", [{**SETTINGS, "delivery_per_target_concurrency": 3}])
async def test_a_fast_receiver_gets_every_delivery_once_and_never_more_than_its_cap_at_once(
    client: httpx.AsyncClient, org: Org, ctx: AppContext, wiring: Wiring
) -> None:
    async with Receiver(default=Reply(delay=0.05)) as receiver:
        await expire_with_callbacks(client, org, ctx, wiring, receiver.url, 40)
        async with running_worker(ctx, wiring) as worker:

            async def all_succeeded() -> bool:
                stored = await stored_deliveries(ctx)
                return len(stored) == 40 and all(status == "succeeded" for status, _ in stored)

            await eventually(all_succeeded, "every callback delivered", timeout=20)
        ids = request_ids(receiver.received)
    assert len(ids) == len(set(ids)) == 40
    assert all(attempts == 1 for _, attempts in await stored_deliveries(ctx))
    assert most_at_once(receiver.received, 0.05) <= 3
    # Claimed ahead: a claim transaction for several deliveries, not one per slot freed.
    assert worker.claims_made < 40 / 3


@pytest.mark.parametrize("settings_overrides", [{**SETTINGS, "delivery_per_target_concurrency": 1}])
async def test_a_delivery_queued_too_long_for_its_lease_is_handed_back_not_sent_late(
    client: httpx.AsyncClient,
    org: Org,
    ctx: AppContext,
    wiring: Wiring,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """One slot; the receiver answers its first callback at once (so it counts as fast and
    more are claimed ahead), then takes 1.9 s over each of the next two. Deliveries queued
    behind those may wait only 0.5 s: sent after 3.8 s, they would go out after their
    leases ran out, when the worker may have claimed them again."""
    replies = iter([Reply(), Reply(delay=1.9), Reply(delay=1.9)])

    def reply(_: Received) -> Reply:
        return next(replies, Reply())

    caplog.set_level(logging.INFO, logger="signoff.worker.deliveries")
    async with Receiver(script=reply) as receiver:
        await expire_with_callbacks(client, org, ctx, wiring, receiver.url, 5)
        async with running_worker(ctx, wiring):

            async def all_succeeded() -> bool:
                stored = await stored_deliveries(ctx)
                return all(status == "succeeded" for status, _ in stored)

            await eventually(all_succeeded, "every callback delivered", timeout=20)
        ids = request_ids(receiver.received)
    assert len(ids) == len(set(ids)) == 5
    assert all(attempts == 1 for _, attempts in await stored_deliveries(ctx))
    assert "waited too long for a slot" in caplog.text
