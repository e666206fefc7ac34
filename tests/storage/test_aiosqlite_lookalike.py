"""Our SQLite connections stand in for aiosqlite's under SQLAlchemy's adapter, which reads
private attributes of the connection it wraps (storage/aiosqlite_lookalike.py). If an upgrade
of SQLAlchemy reads another one, these tests fail and name it."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from sqlalchemy import text
from sqlalchemy.dialects.sqlite import aiosqlite as sqlalchemy_aiosqlite
from sqlalchemy.ext.asyncio import create_async_engine

from signoff.storage.aiosqlite_lookalike import ADAPTER_READS
from signoff.storage.sqlite_driver import InlineConnection, inline_connector

# `self._connection.<attr>`: what the adapter reads of the aiosqlite connection it wraps.
_READ_OF_WRAPPED = re.compile(r"self\._connection\.(_[a-z_]+)")


def test_the_adapter_reads_no_private_attribute_we_do_not_provide() -> None:
    source = inspect.getsource(sqlalchemy_aiosqlite.AsyncAdapt_aiosqlite_connection)
    read = set(_READ_OF_WRAPPED.findall(source))
    unknown = read - ADAPTER_READS
    assert not unknown, (
        f"SQLAlchemy's aiosqlite adapter now reads {sorted(unknown)} of the connection it "
        "wraps: provide them in storage/aiosqlite_lookalike.py (AiosqliteLookalike)"
    )
    assert "_connection" in inspect.getsource(sqlalchemy_aiosqlite.AsyncAdapt_aiosqlite_dbapi)


def test_our_connections_carry_what_the_adapter_reads() -> None:
    import sqlite3

    connection = InlineConnection(sqlite3.connect(":memory:"), busy_timeout=1.0)
    for name in ADAPTER_READS:
        assert hasattr(connection, name), name


async def test_an_engine_on_our_connections_sets_isolation_pings_and_rolls_back(
    tmp_path: Path,
) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'shape.db'}"
    engine = create_async_engine(
        url, pool_pre_ping=True, async_creator=inline_connector(url, busy_timeout=1.0)
    )
    try:
        async with engine.connect() as connection:
            await connection.execution_options(isolation_level="AUTOCOMMIT")
            assert (await connection.execute(text("select 1"))).scalar() == 1
        async with engine.begin() as connection:
            await connection.execute(text("create table t (x integer)"))
        async with engine.connect() as connection:  # a pinged, pooled connection
            await connection.execute(text("insert into t values (1)"))
            await connection.rollback()
            assert (await connection.execute(text("select count(*) from t"))).scalar() == 0
    finally:
        await engine.dispose()
