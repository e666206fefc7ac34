"""Engines, sessions and the few places where SQLite and PostgreSQL differ.

Transactions
------------
Reads run in ordinary transactions. Writes on SQLite start with ``BEGIN IMMEDIATE`` so the
write lock is taken up front (a deferred transaction that reads, then writes, can fail with
SQLITE_BUSY instead of waiting). Inside one process, SQLite writers also queue for their
turn (``group_commit``): SQLite's own busy handler sleeps in growing steps of up to
100 ms, which would wreck tail latency under load, while a queue hands the writer slot
over at once. Writers queued behind one another share a transaction, each in a savepoint
of its own. Other processes (a CLI, a ``signoff worker``) are waited for up to the busy
timeout, with asyncio sleeps: SQLite calls run on the event loop's thread (see
``sqlite_driver``).

On PostgreSQL the same service code takes row locks with ``SELECT ... FOR UPDATE``
(SQLAlchemy drops that clause on SQLite, where the whole transaction is already exclusive).

PostgreSQL connections
----------------------
A pooled connection that sat idle for ``IDLE_PING_SECONDS`` is pinged before use, and
replaced if the server dropped it (a restart, a failover, an idle timeout): the request
never sees the dead connection. One in use a moment ago is not pinged. SQLAlchemy's
``pool_pre_ping`` would ping on every checkout, three round trips each (BEGIN, a query,
ROLLBACK), more than the statements of a get. If the server goes away *under* load,
the requests in flight then fail, and so does the first one to use a dropped
connection; the pool then replaces all its connections at once
(``tests/test_postgres_pool.py``).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Collection, Sequence
from contextlib import asynccontextmanager
from typing import Any

import orjson
from sqlalchemy import Table, event
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)
from sqlalchemy.orm import Session
from sqlalchemy.sql.dml import Insert

from signoff.storage.asyncpg_connections import PLANNED_READ_POOL_SIZE, ReadPool
from signoff.storage.group_commit import GroupCommit
from signoff.storage.prepared import (
    QUEUED_WRITES_KEY,
    STOCK_EXECUTION_SWITCH,
    QueryRunner,
    QueuingSession,
    has_unflushed_changes,
    stock_execution_info,
    switched,
)
from signoff.storage.sqlite_driver import Checkpointer, begin_transaction, inline_connector

SQLITE_BUSY_TIMEOUT_MS = 10_000
# A PostgreSQL connection idle this long is pinged before use (see the module docstring).
IDLE_PING_SECONDS = 10.0
_CHECKED_IN_AT = "signoff.checked_in_at"


def _json_text(value: Any) -> str:
    return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode()


# JSON columns on SQLite are text converted in Python: orjson does it far faster than the
# standard library, which SQLAlchemy uses by default (a create wrote its metadata through
# ``json.dumps``; docs/decisions/0020-what-a-create-pays-for.md). PostgreSQL's driver
# converts JSONB itself.
SQLITE_JSON: dict[str, Any] = {"json_serializer": _json_text, "json_deserializer": orjson.loads}


def _configure_sqlite(engine: AsyncEngine, *, immediate: bool) -> None:
    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Take over BEGIN from the driver so we can choose IMMEDIATE for writers.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(conn: Connection) -> None:
        begin_transaction(conn, "BEGIN IMMEDIATE" if immediate else "BEGIN")


def _ping_idle_connections(engine: AsyncEngine, idle_seconds: float) -> None:
    """SQLAlchemy's "pessimistic disconnect handling" on checkout, for connections that
    sat in the pool for ``idle_seconds`` or more."""

    @event.listens_for(engine.sync_engine, "checkin")
    def _on_checkin(_dbapi_connection: Any, record: Any) -> None:
        record.info[_CHECKED_IN_AT] = time.monotonic()

    @event.listens_for(engine.sync_engine, "checkout")
    def _on_checkout(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        checked_in_at = record.info.get(_CHECKED_IN_AT)
        if checked_in_at is None or time.monotonic() - checked_in_at < idle_seconds:
            return  # new, or in use a moment ago
        try:
            engine.dialect.do_ping(dbapi_connection)
        except Exception as exc:
            # The pool discards this connection and checks out another (a new one).
            raise DisconnectionError("pooled connection found dead") from exc


class Database:
    """Owns the engines of one process and hands out transactional sessions."""

    def __init__(
        self, url: str, *, echo: bool = False, sqlite_before_commit: Sequence[str] = ()
    ) -> None:
        """``sqlite_before_commit``: statements each SQLite connection runs just before it
        commits a transaction that wrote (the search index's catch-up)."""
        self.url = url
        self.is_sqlite = url.startswith("sqlite")
        if self.is_sqlite:
            busy_timeout = SQLITE_BUSY_TIMEOUT_MS / 1000
            self.group_commit: GroupCommit | None = GroupCommit(self._new_write_session)
            # Checkpoints wait for a moment without a write transaction (group_commit).
            self.checkpointer: Checkpointer | None = Checkpointer(url, self.group_commit.exclusive)
            self.read_engine = create_async_engine(
                url,
                echo=echo,
                pool_size=8,
                max_overflow=8,
                async_creator=inline_connector(
                    url, busy_timeout, before_commit=sqlite_before_commit
                ),
                **SQLITE_JSON,
            )
            # One connection suffices for writers: they are serialized anyway.
            self.write_engine = create_async_engine(
                url,
                echo=echo,
                pool_size=1,
                max_overflow=0,
                async_creator=inline_connector(
                    url, busy_timeout, self.checkpointer, before_commit=sqlite_before_commit
                ),
                **SQLITE_JSON,
            )
            _configure_sqlite(self.read_engine, immediate=False)
            _configure_sqlite(self.write_engine, immediate=True)
        else:
            engine = create_async_engine(
                url,
                echo=echo,
                # Write transactions and the ORM's reads; the hot reads have a pool of their
                # own (asyncpg_connections.ReadPool).
                pool_size=12,
                max_overflow=8,
                # Statements the ORM and Core send, prepared once per connection: the list
                # filters alone combine into more than the default hundred.
                connect_args={"prepared_statement_cache_size": 500},
                # JSONB prints a number stored from 1.5e300 with all its digits; orjson reads
                # such an integer back as the float it was, where json.loads would make an
                # integer no encoder here can write again.
                json_deserializer=orjson.loads,
                # As on SQLite: orjson writes JSON (metadata, event data) far faster than
                # the standard library SQLAlchemy uses by default.
                json_serializer=_json_text,
            )
            _ping_idle_connections(engine, IDLE_PING_SECONDS)
            self.read_engine = self.write_engine = engine
            self.group_commit = None
            self.checkpointer = None
        # The hot path's reads, outside any session (``storage/prepared/``); with the
        # measurement switch, through SQLAlchemy's pooled connections instead.
        prepared = not switched(STOCK_EXECUTION_SWITCH)
        postgres = prepared and not self.is_sqlite
        self.queries = QueryRunner(
            self.read_engine,
            url if self.is_sqlite else None,
            SQLITE_BUSY_TIMEOUT_MS / 1000,
            # On PostgreSQL on asyncpg directly, in autocommit: a read outside any session
            # needs no BEGIN and ROLLBACK around it, two round trips (``storage/prepared/``).
            ReadPool(url) if postgres else None,
            ReadPool(url, PLANNED_READ_POOL_SIZE, plan_each_call=True) if postgres else None,
            through_engine=not prepared,
        )
        # Whether the switch was set now: each statement reads it here (session_io).
        info = stock_execution_info()
        self._read_sessions = async_sessionmaker(
            self.read_engine, expire_on_commit=False, info=info
        )
        # PostgreSQL: writes that ask for no answer go out together (prepared.queue_write).
        sync_session_class = Session if self.is_sqlite else QueuingSession
        self._write_sessions = async_sessionmaker(
            self.write_engine,
            expire_on_commit=False,
            sync_session_class=sync_session_class,
            info=info,
        )

    @property
    def dialect(self) -> str:
        return "sqlite" if self.is_sqlite else "postgresql"

    @asynccontextmanager
    async def read_session(self) -> AsyncIterator[AsyncSession]:
        """A session for reads; it never commits anything."""
        async with self._closing(self._read_sessions()) as session:
            yield session

    def _new_write_session(self) -> AsyncSession:
        return self._write_sessions()

    @asynccontextmanager
    async def write_transaction(self) -> AsyncIterator[AsyncSession]:
        """A session whose writes commit when the block ends without an exception, and
        are rolled back when it raises. The block must not commit.

        Services never commit: the endpoint's unit of work, the CLI command or the worker
        loop opens this around the whole use case. On SQLite the transaction may be
        shared with other writers of this process (``group_commit``); either way the
        block returns only once its writes are committed.
        """
        if self.group_commit is not None:
            async with self.group_commit.writer() as session:
                yield session
            return
        session = self._write_sessions()
        try:
            yield session
        except BaseException:
            async with session:  # closed as before (shielded): what it began rolls back
                pass
            raise
        if not _began_anything(session):
            # Its work went out in autocommit (``execute_alone``, ``writes_alone``), or
            # read nothing through it: no transaction, no connection, nothing to commit or
            # close. Committing it anyway cost a create or a decision two greenlet
            # switches and a task of its own for the close.
            return
        async with session:
            await session.commit()

    @asynccontextmanager
    async def _closing(self, session: AsyncSession) -> AsyncIterator[AsyncSession]:
        """Close ``session`` on the way out, returning its connection to the pool.

        ``async with AsyncSession`` closes in a task of its own (shielded from
        cancellation), which keeps the connection checked out for another turn of the event
        loop: under load, more sessions than the pool holds then wait to close, and the
        pool opens and discards connections. SQLite calls complete without yielding
        (``sqlite_driver``), so there a direct close cannot be cut short by a cancellation.
        """
        if not self.is_sqlite:
            async with session:
                yield session
            return
        try:
            yield session
        finally:
            await session.close()

    async def dispose(self) -> None:
        await self.queries.close()
        if self.checkpointer is not None:
            await self.checkpointer.close()
        await self.read_engine.dispose()
        if self.write_engine is not self.read_engine:
            await self.write_engine.dispose()


def _began_anything(session: AsyncSession) -> bool:
    """Whether committing ``session`` would do anything: a transaction begun, objects to
    flush, or writes queued for the commit (``prepared.queue_write``)."""
    return (
        session.in_transaction()
        or has_unflushed_changes(session)
        or bool(session.info.get(QUEUED_WRITES_KEY))
    )


def insert_ignoring_conflicts(
    dialect: str, table: Table, conflict_columns: Sequence[str], where: Any = None
) -> Insert:
    """``INSERT ... ON CONFLICT (cols) [WHERE where] DO NOTHING``: the race-free half of
    get-or-create.

    The loser of a race inserts nothing (PostgreSQL waits for the winner to commit first),
    then reads the winner's row. The values come with each execution, so one statement,
    built once and compiled once, serves every call. ``where``: the unique index is
    partial, and the conflict target must imply its condition to name it.
    """
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    return insert(table).on_conflict_do_nothing(
        index_elements=list(conflict_columns), index_where=where
    )


def not_among(column: Any, ids: Collection[Any]) -> list[Any]:
    """The condition that leaves ``ids`` out of a batch query (rows parked by poison-row
    isolation, channels waiting for their interval), as a list to spread into
    ``.where(*...)``: empty when there are none, so the usual query carries no
    ``NOT IN ()``."""
    return [column.not_in(list(ids))] if ids else []
