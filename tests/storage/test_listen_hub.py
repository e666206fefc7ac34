"""One LISTEN connection per process (``storage.ListenHub``): every channel the process
needs on it, ready when LISTEN is issued, reopened when lost, closed at shutdown."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg  # type: ignore[import-untyped]
import pytest

from signoff.app import create_app
from signoff.config import Settings
from signoff.dashboard.live import NOTIFY_CHANNEL as LIVE_CHANNEL
from signoff.notifications.planning.repository import NOTIFY_CHANNEL as PLAN_CHANNEL
from signoff.storage import REQUEST_CHANNEL, ListenHub
from signoff.storage.asyncpg_connections import asyncpg_dsn
from signoff.webhooks.repository import NOTIFY_CHANNEL as DELIVERY_CHANNEL
from signoff.wiring import Wiring
from tests.conftest import eventually

CHANNEL = "signoff_test_hub"


@asynccontextmanager
async def connected(settings: Settings) -> AsyncIterator[asyncpg.Connection]:
    connection = await asyncpg.connect(asyncpg_dsn(settings.database_url))
    try:
        yield connection
    finally:
        await connection.close()


async def listening_backends(connection: asyncpg.Connection, channel: str = "") -> int:
    """Connections to this database whose last statement was a LISTEN (on ``channel``)."""
    count: int = await connection.fetchval(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
        " AND pid <> pg_backend_pid() AND query ILIKE 'LISTEN%' AND query LIKE $1",
        f"%{channel}%",
    )
    return count


@pytest.mark.usefixtures("postgres_only")
async def test_a_process_listens_on_one_connection_for_everything(settings: Settings) -> None:
    """The workers, a long poll and a live page each need other processes' news: one
    connection hears it all, and the shutdown closes it."""
    wiring = Wiring.from_settings(settings)
    application = create_app(settings, wiring=wiring, background=True)
    async with connected(settings) as observer:
        async with application.router.lifespan_context(application):  # closes wiring after
            with wiring.waiters.watch(uuid.uuid4()):  # a long poll
                await wiring.live.start_listening()  # a live page
                await eventually(
                    lambda: wiring.hub.hears(DELIVERY_CHANNEL) and wiring.hub.hears(PLAN_CHANNEL),
                    "the workers to listen",
                )
                await wiring.hub.ready()
                for channel in (REQUEST_CHANNEL, LIVE_CHANNEL, DELIVERY_CHANNEL, PLAN_CHANNEL):
                    assert wiring.hub.hears(channel), channel

                async def one_listener() -> bool:
                    return await listening_backends(observer) == 1

                await eventually(one_listener, "one listening connection")

        async def none_left() -> bool:
            return await listening_backends(observer) == 0

        await eventually(none_left, "the listening connection to close")


@pytest.mark.usefixtures("postgres_only")
async def test_a_lost_connection_is_reopened_and_its_listeners_look_again(
    settings: Settings,
) -> None:
    hub = ListenHub(settings.database_url, reconnect_seconds=0.05)
    payloads: list[str] = []
    connects: list[None] = []
    try:
        hub.listen(CHANNEL, payloads.append, lambda: connects.append(None))
        await hub.ready()
        assert hub.hears(CHANNEL) and len(connects) == 1
        async with connected(settings) as other:
            terminated = await other.fetchval(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                " AND query LIKE $1",
                f"%{CHANNEL}%",
            )
            assert terminated == 1
            # Notifications sent while nobody listened are lost: the listener is told
            # that listening started again, and looks for itself.
            await eventually(lambda: len(connects) == 2, "the connection to be reopened")
            assert hub.hears(CHANNEL)
            await other.execute("SELECT pg_notify($1, 'after')", CHANNEL)
            await eventually(lambda: payloads == ["after"], "the notification")
    finally:
        await hub.close()
    assert not hub.alive


@pytest.mark.usefixtures("postgres_only")
async def test_a_channel_asked_for_later_joins_the_same_connection(settings: Settings) -> None:
    hub = ListenHub(settings.database_url)
    first, second = f"{CHANNEL}_first", f"{CHANNEL}_second"
    heard: list[tuple[str, str]] = []
    try:
        hub.listen(first, lambda payload: heard.append((first, payload)))
        await hub.ready()
        hub.listen(second, lambda payload: heard.append((second, payload)))
        assert not hub.hears(second)
        await hub.ready()
        assert hub.hears(first) and hub.hears(second)
        async with connected(settings) as other:
            assert await listening_backends(other, CHANNEL) == 1
            await other.execute("SELECT pg_notify($1, 'a'), pg_notify($2, 'b')", first, second)
            await eventually(lambda: sorted(heard) == [(first, "a"), (second, "b")], "both")
    finally:
        await hub.close()


async def test_readiness_does_not_wait_on_a_database_that_is_down() -> None:
    """A failed attempt settles readiness: a live page opens anyway and re-reads."""
    hub = ListenHub("postgresql+asyncpg://nobody@127.0.0.1:1/nothing", reconnect_seconds=60)
    try:
        hub.listen(CHANNEL, lambda _payload: None)
        await hub.ready()
        assert not hub.hears(CHANNEL)
    finally:
        await hub.close()


async def test_without_postgresql_there_is_nothing_to_listen_to() -> None:
    hub = ListenHub(None)
    hub.listen(CHANNEL, lambda _payload: None)
    await hub.ready()  # at once
    assert not hub.alive and not hub.hears(CHANNEL)
    await hub.close()
