"""The hot path's PostgreSQL connections (``asyncpg_shape.ConnectionLender``): one call
per connection at a time, at most ``size`` open, reused after a call that returned or
failed in PostgreSQL, closed after a cancelled call, replaced when the server dropped
them, and closed when idle (one kept)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import asyncpg  # type: ignore[import-untyped]
import pytest

from signoff.storage.asyncpg_shape import ConnectionLender, ReadPool, asyncpg_dsn
from tests.conftest import POSTGRES_URL, _create_pg_database, _drop_pg_database


@pytest.fixture(scope="module")
def postgres_url() -> Iterator[str]:
    """A database of this module's own (it needs no tables)."""
    if not POSTGRES_URL:
        pytest.skip("the connection lender: set SIGNOFF_TEST_POSTGRES_URL=postgresql://... to run")
    name = f"signoff_lender_{uuid.uuid4().hex[:12]}"
    url = asyncio.run(_create_pg_database(name))
    try:
        yield url
    finally:
        asyncio.run(_drop_pg_database(name))


def lender_on(
    url: str, size: int = 2, idle_seconds: float = 60.0, name: str = "signoff-tests"
) -> ConnectionLender:
    """A lender whose connections show as ``name`` in ``pg_stat_activity``."""
    dsn = asyncpg_dsn(url)
    settings = {"application_name": name}
    return ConnectionLender(
        lambda: asyncpg.connect(dsn, server_settings=settings), size, idle_seconds
    )


@pytest.fixture
async def lender(postgres_url: str) -> AsyncIterator[ConnectionLender]:
    lender = lender_on(postgres_url)
    yield lender
    await lender.close()


async def backend_pid(lender: ConnectionLender, hold_seconds: float = 0.0) -> int:
    async def work(connection: Any) -> int:
        pid = int(await connection.fetchval("SELECT pg_backend_pid()"))
        if hold_seconds:
            await connection.execute(f"SELECT pg_sleep({hold_seconds})")
        return pid

    return int(await lender.run(work))


async def sessions_open(postgres_url: str, name: str) -> int:
    """Connections to the test's database named ``name`` (``lender_on``)."""
    admin = await asyncpg.connect(asyncpg_dsn(postgres_url))
    try:
        return int(
            await admin.fetchval(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE datname = current_database() AND application_name = $1",
                name,
            )
        )
    finally:
        await admin.close()


async def test_a_connection_serves_one_call_at_a_time_and_calls_past_the_size_wait(
    lender: ConnectionLender,
) -> None:
    in_use: set[int] = set()
    most = 0

    async def call() -> int:
        nonlocal most

        async def work(connection: Any) -> int:
            nonlocal most
            pid = int(await connection.fetchval("SELECT pg_backend_pid()"))
            assert pid not in in_use  # no other call on this connection meanwhile
            in_use.add(pid)
            most = max(most, len(in_use))
            await connection.execute("SELECT pg_sleep(0.05)")
            in_use.discard(pid)
            return pid

        return int(await lender.run(work))

    pids = await asyncio.gather(*(call() for _ in range(7)))
    assert most == 2
    assert len(set(pids)) == 2


async def test_the_connection_is_reused_after_a_call_and_after_an_error_postgresql_reports(
    lender: ConnectionLender,
) -> None:
    first = await backend_pid(lender)
    with pytest.raises(asyncpg.DivisionByZeroError):
        await lender.run(lambda connection: connection.fetchval("SELECT 1 / 0"))
    assert await backend_pid(lender) == first


async def test_a_cancelled_call_closes_its_connection_and_the_next_call_opens_another(
    lender: ConnectionLender, postgres_url: str
) -> None:
    first = await backend_pid(lender)
    slow = asyncio.create_task(backend_pid(lender, hold_seconds=5))
    await asyncio.sleep(0.2)
    slow.cancel()
    with pytest.raises(asyncio.CancelledError):
        await slow
    second = await backend_pid(lender)  # not "another operation is in progress"
    assert second != first


async def test_a_connection_the_server_closed_while_idle_is_replaced_unseen(
    lender: ConnectionLender, postgres_url: str
) -> None:
    first = await backend_pid(lender)
    admin = await asyncpg.connect(asyncpg_dsn(postgres_url))
    try:
        await admin.execute("SELECT pg_terminate_backend($1)", first)
    finally:
        await admin.close()
    await asyncio.sleep(0.2)  # the connection reads the server's goodbye
    second = await backend_pid(lender)
    assert second != first


async def test_a_waiting_call_that_is_cancelled_passes_its_turn_on(postgres_url: str) -> None:
    lender = lender_on(postgres_url, size=1)
    try:
        holding = asyncio.create_task(backend_pid(lender, hold_seconds=0.2))
        await asyncio.sleep(0.05)
        waiting = asyncio.create_task(backend_pid(lender))
        await asyncio.sleep(0.05)
        waiting.cancel()
        pid = await holding
        assert await asyncio.wait_for(backend_pid(lender), 2) == pid
        assert waiting.cancelled()
    finally:
        await lender.close()


async def test_connections_idle_for_their_time_are_closed_but_one(postgres_url: str) -> None:
    lender = lender_on(postgres_url, size=3, idle_seconds=0.2, name="signoff-idle")
    try:
        await asyncio.gather(*(backend_pid(lender, hold_seconds=0.05) for _ in range(3)))
        assert await sessions_open(postgres_url, "signoff-idle") == 3
        await asyncio.sleep(0.6)
        assert await sessions_open(postgres_url, "signoff-idle") == 1
        await backend_pid(lender)  # the one kept still serves
    finally:
        await lender.close()
    await asyncio.sleep(0.1)
    assert await sessions_open(postgres_url, "signoff-idle") == 0


async def test_the_read_pool_decodes_json_as_the_engine_does(postgres_url: str) -> None:
    pool = ReadPool(postgres_url)
    try:
        value = await pool.fetch(
            lambda connection: connection.fetchval("""SELECT '{"a": [1, 2.5]}'::jsonb""")
        )
    finally:
        await pool.close()
    assert value == {"a": [1, 2.5]}
