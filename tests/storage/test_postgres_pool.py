"""PostgreSQL's pool (src/signoff/db.py): an idle connection the server dropped is
replaced before use, a busy one is not pinged, and the hot path's reads run without a
transaction around them."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
from sqlalchemy import func, select, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import create_async_engine

from signoff.storage import database as db_module
from signoff.storage.database import Database
from signoff.storage.prepared import PreparedQuery
from tests.conftest import POSTGRES_URL, _create_pg_database, _drop_pg_database


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
    keeps PostgreSQL's default, which may reuse one plan and spares the planning."""
    setting = PreparedQuery(select(func.current_setting("plan_cache_mode").label("mode")))
    [[generic]] = await database.queries.snapshot_read((setting, {}))
    [[per_call]] = await database.queries.snapshot_read((setting, {}), plan_each_call=True)
    assert (generic.mode, per_call.mode) == ("auto", "force_custom_plan")
