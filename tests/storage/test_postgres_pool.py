"""PostgreSQL's pools (src/signoff/storage): an idle connection the server dropped is
replaced before use, a busy one is not pinged, and the hot path's reads run without a
transaction around them. The hot path's connections (``ConnectionLender``): one call per
connection at a time, at most ``size`` open, reused after a call that returned or failed
in PostgreSQL, closed after a cancelled call, replaced when the server dropped them, and
closed when idle (one kept)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import asyncpg  # type: ignore[import-untyped]
import pytest
from sqlalchemy import func, select, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import create_async_engine

from signoff.storage import database as db_module
from signoff.storage.asyncpg_connections import ConnectionLender, ReadPool, asyncpg_dsn
from signoff.storage.database import Database
from signoff.storage.prepared import PreparedQuery
from tests.conftest import POSTGRES_URL, _create_pg_database, _drop_pg_database, eventually


@pytest.fixture(scope="module")
def postgres_url() -> Iterator[str]:
    """A database of this module's own (it needs no tables)."""
    if not POSTGRES_URL:
        pytest.skip("PostgreSQL's pool: set SIGNOFF_TEST_POSTGRES_URL=postgresql://... to run")
    name = f"signoff_pool_{uuid.uuid4().hex[:12]}"
    url = asyncio.run(_create_pg_database(name))
    try:
        yield url
    finally:
        asyncio.run(_drop_pg_database(name))


@pytest.fixture
async def database(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> AsyncIterator[Database]:
    idle_seconds = getattr(request, "param", db_module.IDLE_PING_SECONDS)
    monkeypatch.setattr(db_module, "IDLE_PING_SECONDS", idle_seconds)
    database = Database(postgres_url)
    yield database
    await database.dispose()


async def backend_pid(database: Database) -> int:
    async with database.read_session() as session:
        return int((await session.execute(text("SELECT pg_backend_pid()"))).scalar_one())


async def terminate(database_url: str, pid: int) -> None:
    admin = create_async_engine(database_url, isolation_level="AUTOCOMMIT")
    try:
        async with admin.connect() as connection:
            await connection.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
    finally:
        await admin.dispose()


@pytest.mark.parametrize("database", [0.0], indirect=True)  # every connection counts as idle
async def test_an_idle_connection_the_server_dropped_is_replaced_unseen(
    database: Database, postgres_url: str
) -> None:
    first = await backend_pid(database)
    await terminate(postgres_url, first)
    second = await backend_pid(database)  # no error: the dead one was found and replaced
    assert second != first


async def test_a_connection_dropped_while_busy_fails_once_then_the_pool_recovers(
    database: Database, postgres_url: str
) -> None:
    first = await backend_pid(database)
    await terminate(postgres_url, first)
    with pytest.raises(DBAPIError):
        await backend_pid(database)  # used a moment ago: not pinged, and found dead
    second = await backend_pid(database)
    assert second != first


@pytest.fixture
def pings(database: Database, monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """The connections pinged on checkout, in order."""
    pinged: list[object] = []
    dialect = database.read_engine.dialect
    ping = dialect.do_ping

    def counting_ping(dbapi_connection: object) -> bool:
        pinged.append(dbapi_connection)
        return ping(dbapi_connection)

    monkeypatch.setattr(dialect, "do_ping", counting_ping)
    return pinged


async def test_a_connection_in_use_a_moment_ago_is_not_pinged(
    database: Database, pings: list[object]
) -> None:
    for _ in range(3):
        await backend_pid(database)
    assert pings == []


@pytest.mark.parametrize("database", [0.0], indirect=True)
async def test_an_idle_connection_is_pinged(database: Database, pings: list[object]) -> None:
    await backend_pid(database)  # a new connection: nothing to ping
    await backend_pid(database)
    assert len(pings) == 1


async def test_hot_path_reads_run_without_a_transaction(database: Database) -> None:
    # Inside a transaction now() is the transaction's start; outside, each statement's.
    now = PreparedQuery(select(func.clock_timestamp().label("at"), func.now().label("now")))
    pause = PreparedQuery(select(func.pg_sleep(0.05).label("slept")))
    [[first], _, [second]] = await database.queries.snapshot_read((now, {}), (pause, {}), (now, {}))
    assert second.now > first.now
    assert (second.now - first.now).total_seconds() >= 0.05


async def test_reads_whose_plans_depend_on_their_values_are_planned_for_each_call(
    database: Database,
) -> None:
    """A filtered list page asks for a plan made for its values on every call (a generic
    plan made for a guess was tens of times slower in a large org); a get or a plain page
    is one plan whatever its values, made once per connection at its first run."""
    setting = PreparedQuery(select(func.current_setting("plan_cache_mode").label("mode")))
    [[generic]] = await database.queries.snapshot_read((setting, {}))
    [[per_call]] = await database.queries.snapshot_read((setting, {}), plan_each_call=True)
    assert (generic.mode, per_call.mode) == ("force_generic_plan", "force_custom_plan")


# ---- the hot path's connections ----


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


async def lent_pid(lender: ConnectionLender, hold_seconds: float = 0.0) -> int:
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


async def in_query(postgres_url: str, pid: int) -> bool:
    """The server runs a statement for the session ``pid`` now."""
    admin = await asyncpg.connect(asyncpg_dsn(postgres_url))
    try:
        state = await admin.fetchval("SELECT state FROM pg_stat_activity WHERE pid = $1", pid)
        return bool(state == "active")
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
    first = await lent_pid(lender)
    with pytest.raises(asyncpg.DivisionByZeroError):
        await lender.run(lambda connection: connection.fetchval("SELECT 1 / 0"))
    assert await lent_pid(lender) == first


async def test_a_cancelled_call_closes_its_connection_and_the_next_call_opens_another(
    lender: ConnectionLender, postgres_url: str
) -> None:
    first = await lent_pid(lender)
    slow = asyncio.create_task(lent_pid(lender, hold_seconds=5))
    await eventually(lambda: in_query(postgres_url, first), "the slow call's statement")
    slow.cancel()
    with pytest.raises(asyncio.CancelledError):
        await slow
    second = await lent_pid(lender)  # not "another operation is in progress"
    assert second != first


async def test_a_lent_connection_the_server_closed_while_idle_is_replaced_unseen(
    lender: ConnectionLender, postgres_url: str
) -> None:
    async def lent(connection: Any) -> Any:
        return connection

    connection = await lender.run(lent)
    first = await lent_pid(lender)
    await terminate(postgres_url, first)
    await eventually(connection.is_closed, "the connection to read the server's goodbye")
    second = await lent_pid(lender)
    assert second != first


async def test_a_waiting_call_that_is_cancelled_passes_its_turn_on(postgres_url: str) -> None:
    lender = lender_on(postgres_url, size=1)
    try:
        holding = asyncio.create_task(lent_pid(lender, hold_seconds=0.5))
        waiting = asyncio.create_task(lent_pid(lender))
        # The second call waits for its turn (the size is one) while the first holds it.
        await eventually(lambda: len(lender._waiting) == 1, "the second call to wait")
        assert not holding.done()
        waiting.cancel()
        pid = await holding
        assert await asyncio.wait_for(lent_pid(lender), 2) == pid
        assert waiting.cancelled()
    finally:
        await lender.close()


async def test_connections_idle_for_their_time_are_closed_but_one(postgres_url: str) -> None:
    lender = lender_on(postgres_url, size=3, idle_seconds=0.2, name="signoff-idle")
    try:
        pids = await asyncio.gather(*(lent_pid(lender, hold_seconds=0.05) for _ in range(3)))
        assert await sessions_open(postgres_url, "signoff-idle") == 3

        async def one_left() -> bool:
            return await sessions_open(postgres_url, "signoff-idle") == 1

        await eventually(one_left, "the idle connections but one to close")
        assert await lent_pid(lender) in pids  # the one kept still serves
    finally:
        await lender.close()

    async def all_gone() -> bool:
        return await sessions_open(postgres_url, "signoff-idle") == 0

    await eventually(all_gone, "the lender's connections to end")


async def test_the_read_pool_decodes_json_as_the_engine_does(postgres_url: str) -> None:
    pool = ReadPool(postgres_url)
    try:
        value = await pool.fetch(
            lambda connection: connection.fetchval("""SELECT '{"a": [1, 2.5]}'::jsonb""")
        )
    finally:
        await pool.close()
    assert value == {"a": [1, 2.5]}
