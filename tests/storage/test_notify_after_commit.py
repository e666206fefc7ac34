"""PostgreSQL: the hot path's writes commit without a NOTIFY of their own, and the process
sends what their triggers would have after the commit, in batches (migration 0019,
``storage.notifications.Notifier``). Other processes must still hear every change."""

from __future__ import annotations

import asyncio
import time
import uuid

import asyncpg  # type: ignore[import-untyped]
import httpx
import pytest

from signoff.config import Settings
from signoff.context import AppContext
from signoff.dashboard.live import NOTIFY_CHANNEL as LIVE_CHANNEL
from signoff.notifications.planning.repository import NOTIFY_CHANNEL as PLAN_CHANNEL
from signoff.storage import REQUEST_CHANNEL, Notifier
from signoff.storage.asyncpg_connections import NOTIFY_AFTER_COMMIT, asyncpg_dsn
from signoff.wiring import Wiring
from tests.conftest import Org, create_approval, eventually
from tests.notifications.support import CHANNEL_MATCHING_NOTHING
from tests.storage.listen import heard

pytestmark = pytest.mark.usefixtures("postgres_only")  # LISTEN/NOTIFY


async def test_a_burst_of_changes_sends_one_notification_per_org(settings: Settings) -> None:
    listening, sending = Wiring.from_settings(settings), Wiring.from_settings(settings)
    acme, globex = uuid.uuid4(), uuid.uuid4()
    try:
        await listening.live.start_listening()
        async with heard(settings, LIVE_CHANNEL) as payloads:
            with (
                listening.live.watch(acme) as acme_changed,
                listening.live.watch(globex) as globex_changed,
            ):
                for _ in range(50):  # creates of two orgs, all committed in one moment
                    sending.live.request_changed(acme)
                    sending.live.request_changed(globex)
                await asyncio.wait_for(acme_changed.wait(), 2)
                await asyncio.wait_for(globex_changed.wait(), 2)
            await payloads.everything_sent_so_far(sending.ctx.notifier)
        assert sorted(payloads) == sorted([acme.hex, globex.hex])
    finally:
        await sending.close()
        await listening.close()


async def test_changes_after_a_batch_left_go_out_in_the_next(settings: Settings) -> None:
    sending = Wiring.from_settings(settings)
    acme = uuid.uuid4()
    try:
        async with heard(settings, LIVE_CHANNEL) as payloads:
            sending.live.request_changed(acme)
            await eventually(lambda: len(payloads) == 1, "the first notification")
            sending.live.request_changed(acme)  # a later change is not lost in the first
            await eventually(lambda: len(payloads) == 2, "the second notification")
    finally:
        await sending.close()


@pytest.mark.parametrize("deferred", [True, False], ids=["hot-path", "other"])
async def test_the_trigger_is_silent_only_where_the_process_notifies_itself(
    settings: Settings, org: Org, client: httpx.AsyncClient, ctx: AppContext, deferred: bool
) -> None:
    writer = await asyncpg.connect(
        asyncpg_dsn(settings.database_url),
        server_settings=NOTIFY_AFTER_COMMIT if deferred else {},
    )
    try:
        async with heard(settings, REQUEST_CHANNEL) as payloads:
            # A create changes no status: neither its process nor a trigger names it.
            created = await create_approval(client, org.member)
            await writer.execute(  # a status change, as the CLI, a worker or psql make one
                "UPDATE approval_requests SET status = 'rejected' WHERE id = $1",
                uuid.UUID(created["id"]),
            )
            await payloads.everything_sent_so_far(ctx.notifier)
        assert payloads == ([] if deferred else [created["id"]])
    finally:
        await writer.close()


async def test_a_create_and_a_decision_are_still_heard_by_other_processes(
    settings: Settings, org: Org, client: httpx.AsyncClient
) -> None:
    # An org that can notify: its creates write a plan row (those of others write none).
    routed = await client.put(
        "/api/v1/routing", json=CHANNEL_MATCHING_NOTHING, headers=org.admin.headers
    )
    assert routed.status_code == 200, routed.text
    async with (
        heard(settings, PLAN_CHANNEL) as planned,
        heard(settings, REQUEST_CHANNEL) as decided,
    ):
        created = await create_approval(client, org.member)
        # The planner of another process wakes.
        await eventually(lambda: len(planned) >= 1, "the notification plan's notification")
        response = await client.patch(
            f"/api/v1/approvals/{created['id']}",
            headers=org.admin.headers,
            json={"decision": "approve"},
        )
        assert response.status_code == 200, response.text
        # What wakes another replica's long poll.
        await eventually(lambda: created["id"] in decided, "the decision's notification")


async def test_a_busy_process_sends_one_batch_per_interval_at_most(settings: Settings) -> None:
    """Each batch is a transaction and wakes every listener of the database: under load
    the batches are spaced out, the changes asked for meanwhile gathered in the next
    one, none lost. An idle process still sends at once."""
    notifier = Notifier(settings.database_url, batch_interval=0.5)
    try:
        async with heard(settings, LIVE_CHANNEL) as payloads:
            started = time.monotonic()
            notifier.send(LIVE_CHANNEL, "first")
            await eventually(lambda: payloads == ["first"], "the first notification")
            assert time.monotonic() - started < 0.5  # not held back
            notifier.send(LIVE_CHANNEL, "second")
            notifier.send(LIVE_CHANNEL, "third")
            await eventually(lambda: len(payloads) == 3, "the later notifications")
            assert time.monotonic() - started >= 0.5
        assert payloads == ["first", "second", "third"]
    finally:
        await notifier.close()


async def test_the_notifier_commits_without_waiting_for_the_disk(settings: Settings) -> None:
    """Its transactions only notify, and a notification is a wake-up: they do not wait
    for a flush of the write-ahead log, and hold nobody else up while it happens."""
    notifier = Notifier(settings.database_url)
    try:
        connection = await notifier._connected()
        assert await connection.fetchval("SHOW synchronous_commit") == "off"
        async with heard(settings, LIVE_CHANNEL) as payloads:
            notifier.send(LIVE_CHANNEL, "heard")
            await eventually(lambda: payloads == ["heard"], "the notification")
    finally:
        await notifier.close()
