"""The one place that reaches under SQLAlchemy's asyncpg adapter, and the plain asyncpg
connections the hot path reads with.

Prepared queries run on asyncpg directly (``prepared/``): SQLAlchemy's execution
(execution context, compiled-cache lookup, result and row objects) cost a PostgreSQL get
several times what asyncpg takes to send the query and read its answer. Two places:

- reads, outside any session: on a small pool of plain asyncpg connections of their own
  (``ReadPool``, lent by ``ConnectionLender``), which decode JSON as the engine's do, in
  autocommit (no ``BEGIN``/``COMMIT`` round trips around a single read);
- writes inside a session's transaction: on the asyncpg connection under the session, after
  the adapter has started its transaction. That needs two private attributes of SQLAlchemy's
  ``AsyncAdapt_asyncpg_connection``, ``_connection`` (the asyncpg connection) and
  ``_transaction`` with ``_start_transaction()`` (its lazy ``BEGIN``), named in
  ``ADAPTER_ATTRIBUTES``; ``tests/storage/test_asyncpg_connections.py`` fails, naming the
  attribute, if an upgrade moves them.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.util import await_only

# What this module reads of SQLAlchemy's asyncpg adapter (see above).
ADAPTER_ATTRIBUTES = ("_connection", "_transaction", "_start_transaction")
# The hot path's statements outside a session: a get, the authentication of calls that
# read their principal, and, in autocommit, a create's one statement and a decision's read
# and its one write (``prepared.execute_alone``, ``prepared.writes_alone``). Each holds
# its connection for one round trip; a write's includes PostgreSQL's commit, so with
# half as many the connections of ``make bench`` queued for them, at a cost in CPU and
# in the tail (docs/decisions/0011-postgresql-writes-in-one-statement-decisions-without-locks.md).
READ_POOL_SIZE = 16
# Filtered and searched list pages (``plan_each_call``): two or three round trips each.
PLANNED_READ_POOL_SIZE = 8
# The hot path's writes commit without their triggers' NOTIFY: a notifying commit holds
# the database's notification lock until it is on disk, so such commits queue one behind
# the other. The process sends those notifications itself, in batches, once the
# transaction is over (``AppContext.transaction``, ``storage.notifications.Notifier``;
# migration 0019). Only ``AppContext.transaction`` writes through these connections.
NOTIFY_AFTER_COMMIT = {"signoff.notify_after_commit": "on"}
# The hot path's statements (a get by id, a plain page, a create, a decision) are the
# same plan whatever their values, so each connection plans each of them once, at its
# first run. PostgreSQL's default plans a prepared statement's first five runs for their
# values before it may keep a generic plan: on every connection opened, the plain page's
# first runs took plans far slower than the generic one, and those calls made the list's
# tail (docs/decisions/0013-postgresql-connection-lender-and-generic-plans.md).
HOT_PATH_SETTINGS = {**NOTIFY_AFTER_COMMIT, "plan_cache_mode": "force_generic_plan"}


def asyncpg_dsn(url: str) -> str:
    """``url`` (``postgresql+asyncpg://...``) as asyncpg's own ``postgresql://`` DSN."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


async def _decode_json_as_the_engine_does(connection: Any) -> None:
    """JSON and JSONB in and out as SQLAlchemy's asyncpg dialect sets them up (text in,
    decoded values out), with orjson as ``Database`` configures the engine."""
    await connection.set_type_codec(
        "json",
        encoder=str.encode,
        decoder=orjson.loads,
        schema="pg_catalog",
        format="binary",
    )
    await connection.set_type_codec(
        "jsonb",
        encoder=lambda text: b"\x01" + text.encode(),
        decoder=lambda raw: orjson.loads(raw[1:]),
        schema="pg_catalog",
        format="binary",
    )


# The measurement switch (docs/performance.md, *Hand-written replacements*): the hot path's
# connections come from asyncpg's own pool instead of ``ConnectionLender``.
STOCK_SWITCH = "SIGNOFF_STOCK_PG_POOL"
# A connection of the hot path unused this long is closed (one is kept).
IDLE_SECONDS = 60.0


class ReadPool:
    """asyncpg connections for statements outside any session, opened on first use."""

    def __init__(
        self, url: str, size: int = READ_POOL_SIZE, *, plan_each_call: bool = False
    ) -> None:
        """``plan_each_call``: PostgreSQL plans every execution for its values (see
        below); else each statement keeps the generic plan made at its first run."""
        self._dsn = asyncpg_dsn(url)
        self._size = size
        # With ``plan_each_call``, each execution is planned for its values. asyncpg
        # prepares a statement once per connection, and after five executions PostgreSQL
        # may keep a generic plan, made without the values: a list page's filters (a window
        # of dates, a common or a rare word) then kept a plan made for a guess, far
        # slower in a large org (docs/decisions/0009-list-pages-index-hints-and-the-1m-row-org.md).
        # Planning
        # anew costs every call, so the statements whose plans do not depend on their
        # values (a get, a plain page) keep generic plans, on a pool of their own.
        self._server_settings = (
            {"plan_cache_mode": "force_custom_plan"} if plan_each_call else HOT_PATH_SETTINGS
        )
        self._lender: ConnectionLender | _StockPool | None = None

    async def fetch(self, run: Callable[[Any], Awaitable[Any]]) -> Any:
        """``await run(connection)`` on a connection lent for that call alone."""
        if self._lender is None:
            self._lender = (
                _StockPool(self._dsn, self._size, self._server_settings)
                if os.environ.get(STOCK_SWITCH) == "1"
                else ConnectionLender(self._connect, self._size, IDLE_SECONDS)
            )
        return await self._lender.run(run)

    async def _connect(self) -> Any:
        import asyncpg  # type: ignore[import-untyped]

        connection = await asyncpg.connect(self._dsn, server_settings=self._server_settings)
        await _decode_json_as_the_engine_does(connection)
        return connection

    async def close(self) -> None:
        if self._lender is not None:
            lender, self._lender = self._lender, None
            await lender.close()


class ConnectionLender:
    """asyncpg connections, each lent to one call at a time: the hot path's pool.

    Why not asyncpg's ``Pool``: a get is one statement, and the pool's checkout and return
    cost it about as much CPU as the statement's own round trip (the return runs as a
    task of its own behind ``asyncio.shield``, the checkout builds a proxy, each re-arms a
    timer; docs/performance.md, *Hand-written replacements*). Here a call takes an idle
    connection and puts it back without waiting on anything.

    - Connections are opened on demand, up to ``size``; calls beyond that wait their
      turn, first come first served. The connection returned last is lent first, so a
      quiet server uses few, and those idle for ``idle_seconds`` are closed (one kept).
    - A connection goes back to the idle ones after a call that returned, or that failed
      with an error PostgreSQL reported: its statement failed, and (in autocommit) left
      nothing open. After anything else (a cancelled call, a broken connection) it is
      closed, since what it is in the middle of is unknown, and the next call opens one.
    - A connection the server closed while idle is found closed when lent, and replaced.
    """

    def __init__(
        self, connect: Callable[[], Awaitable[Any]], size: int, idle_seconds: float
    ) -> None:
        import asyncpg  # not imported at all on SQLite

        self._reported_by_server: type[BaseException] = asyncpg.PostgresError
        self._connect = connect
        self._size = size
        self._idle_seconds = idle_seconds
        self._idle: deque[tuple[Any, float]] = deque()  # (connection, returned at)
        self._waiting: deque[asyncio.Future[Any]] = deque()
        self._open = 0  # connections open or being opened
        self._closed = False
        self._idle_check: asyncio.TimerHandle | None = None

    async def run(self, work: Callable[[Any], Awaitable[Any]]) -> Any:
        """``await work(connection)``, on a connection no other call uses meanwhile."""
        connection = await self._borrow()
        try:
            result = await work(connection)
        except BaseException as exc:
            reported = isinstance(exc, self._reported_by_server)
            self._give_back(connection, reusable=reported and not connection.is_in_transaction())
            raise
        self._give_back(connection, reusable=True)
        return result

    async def _borrow(self) -> Any:
        while True:
            if self._closed:
                raise RuntimeError("the connection lender is closed")
            if self._idle:
                connection, _ = self._idle.pop()
                if not connection.is_closed():
                    return connection
                self._open -= 1  # the server closed it: open another
                continue
            if self._open < self._size:
                return await self._open_one()
            connection = await self._wait_turn()
            if connection is not None:
                return connection
            # None: a connection was closed, and its place is free to open one.

    async def _open_one(self) -> Any:
        self._open += 1
        try:
            connection = await self._connect()
        except BaseException:
            self._open -= 1
            self._wake_one(None)  # a caller waiting for a place may try in turn
            raise
        if self._idle_check is None:
            self._arm_idle_check()
        return connection

    async def _wait_turn(self) -> Any | None:
        turn = asyncio.get_running_loop().create_future()
        self._waiting.append(turn)
        try:
            return await turn
        except asyncio.CancelledError:
            # Cancelled after a connection (or a place) was handed over: pass it on.
            if turn.done() and not turn.cancelled():
                handed = turn.result()
                if handed is not None:
                    self._give_back(handed, reusable=True)
                else:
                    self._wake_one(None)
            raise

    def _give_back(self, connection: Any, *, reusable: bool) -> None:
        if not reusable or self._closed or connection.is_closed():
            connection.terminate()
            self._open -= 1
            self._wake_one(None)
            return
        if not self._wake_one(connection):
            self._idle.append((connection, time.monotonic()))

    def _wake_one(self, handed: Any | None) -> bool:
        """Hand ``handed`` (a connection, or None: a place to open one) to the first
        caller still waiting; False if none is."""
        while self._waiting:
            turn = self._waiting.popleft()
            if not turn.done():
                turn.set_result(handed)
                return True
        return False

    def _arm_idle_check(self) -> None:
        loop = asyncio.get_running_loop()
        self._idle_check = loop.call_later(self._idle_seconds, self._close_idle)

    def _close_idle(self) -> None:
        """Close the connections unused for ``idle_seconds``, the oldest first; keep one."""
        self._idle_check = None
        if self._closed:
            return
        stale_before = time.monotonic() - self._idle_seconds
        while len(self._idle) > 1 and self._idle[0][1] < stale_before:
            connection, _ = self._idle.popleft()
            connection.terminate()
            self._open -= 1
        self._arm_idle_check()

    async def close(self) -> None:
        """Close the idle connections; those lent now are closed when given back."""
        self._closed = True
        if self._idle_check is not None:
            self._idle_check.cancel()
            self._idle_check = None
        idle, self._idle = self._idle, deque()
        self._open -= len(idle)
        await asyncio.gather(*(connection.close() for connection, _ in idle))
        while self._waiting:
            turn = self._waiting.popleft()
            if not turn.done():
                turn.set_exception(RuntimeError("the connection lender is closed"))


async def _nothing_to_reset(_connection: Any) -> None:
    return None


class _StockPool:
    """asyncpg's ``Pool``, for the measurement switch only (``STOCK_SWITCH``)."""

    def __init__(self, dsn: str, size: int, server_settings: dict[str, str]) -> None:
        self._dsn = dsn
        self._size = size
        self._server_settings = server_settings
        self._pool: Any = None
        self._opening = asyncio.Lock()

    async def run(self, work: Callable[[Any], Awaitable[Any]]) -> Any:
        pool = self._pool or await self._start()
        async with pool.acquire() as connection:
            return await work(connection)

    async def _start(self) -> Any:
        import asyncpg

        async with self._opening:
            if self._pool is None:
                self._pool = await asyncpg.create_pool(
                    self._dsn,
                    min_size=1,
                    max_size=self._size,
                    init=_decode_json_as_the_engine_does,
                    # asyncpg's default reset (unlock, close cursors, UNLISTEN, RESET ALL)
                    # is a round trip on every release; these connections change no
                    # session state.
                    reset=_nothing_to_reset,
                    server_settings=self._server_settings,
                    max_inactive_connection_lifetime=IDLE_SECONDS,
                )
        return self._pool

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()


async def asyncpg_in_transaction(connection: AsyncConnection) -> Any:
    """The asyncpg connection under a session's ``connection``, with the session's
    transaction begun on it: statements run on it commit or roll back with the session."""
    adapter: Any = connection.sync_connection.connection.dbapi_connection  # type: ignore[union-attr]
    if adapter._transaction is None:
        await adapter._start_transaction()
    return adapter._connection


def asyncpg_under(connection: Connection) -> Any:
    """As ``asyncpg_in_transaction``, from SQLAlchemy's synchronous side (an event run
    inside the session's async call): the transaction is begun with ``await_only``."""
    adapter: Any = connection.connection.dbapi_connection
    if adapter._transaction is None:
        await_only(adapter._start_transaction())
    return adapter._connection
