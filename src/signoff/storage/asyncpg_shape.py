"""The one place that reaches under SQLAlchemy's asyncpg adapter, and the plain asyncpg
connections the hot path reads with.

Prepared queries run on asyncpg directly (``prepared.py``): SQLAlchemy's execution
(execution context, compiled-cache lookup, result and row objects) cost a PostgreSQL get
several times what asyncpg takes to send the query and read its answer. Two places:

- reads, outside any session: on a small asyncpg pool of their own (``ReadPool``), whose
  connections decode JSON as the engine's do, in autocommit (no ``BEGIN``/``COMMIT``
  round trips around a single read);
- writes inside a session's transaction: on the asyncpg connection under the session, after
  the adapter has started its transaction. That needs two private attributes of SQLAlchemy's
  ``AsyncAdapt_asyncpg_connection``, ``_connection`` (the asyncpg connection) and
  ``_transaction`` with ``_start_transaction()`` (its lazy ``BEGIN``), named in
  ``ADAPTER_ATTRIBUTES``; ``tests/storage/test_asyncpg_shape.py`` fails, naming the
  attribute, if an upgrade moves them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
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
# its connection for one round trip; a write's includes PostgreSQL's commit, so with 8
# the 32 connections of ``make bench`` queued for them: 16 cost a create and a decision
# 15 % less CPU and a quarter of their p99 (docs/engineering-log.md, *Issue 24, section 1:
# the principal in the first statement*).
READ_POOL_SIZE = 16
# Filtered and searched list pages (``plan_each_call``): two or three round trips each.
PLANNED_READ_POOL_SIZE = 8
# The hot path's writes commit without their triggers' NOTIFY: a notifying commit holds
# the database's notification lock until it is on disk, so such commits queue one behind
# the other. The process sends those notifications itself, in batches, once the
# transaction is over (``AppContext.transaction``, ``storage.notifications.Notifier``;
# migration 0019). Only ``AppContext.transaction`` writes through these connections.
NOTIFY_AFTER_COMMIT = {"signoff.notify_after_commit": "on"}


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


async def _nothing_to_reset(_connection: Any) -> None:
    return None


class ReadPool:
    """asyncpg connections for reads outside any session, opened on first use."""

    def __init__(
        self, url: str, size: int = READ_POOL_SIZE, *, plan_each_call: bool = False
    ) -> None:
        """``plan_each_call``: PostgreSQL plans every execution for its values (see
        ``_open``); else it may keep a generic plan after a statement's fifth run."""
        self._dsn = asyncpg_dsn(url)
        self._size = size
        self._server_settings = (
            {"plan_cache_mode": "force_custom_plan"} if plan_each_call else NOTIFY_AFTER_COMMIT
        )
        self._pool: Any = None
        self._opening: asyncio.Lock | None = None

    async def fetch(self, run: Callable[[Any], Any]) -> Any:
        """``await run(connection)`` on a pooled connection."""
        pool = self._pool or await self._open()
        async with pool.acquire() as connection:
            return await run(connection)

    async def _open(self) -> Any:
        import asyncpg  # type: ignore[import-untyped]

        if self._opening is None:
            self._opening = asyncio.Lock()
        async with self._opening:
            if self._pool is None:
                self._pool = await asyncpg.create_pool(
                    self._dsn,
                    min_size=1,
                    max_size=self._size,
                    init=_decode_json_as_the_engine_does,
                    # asyncpg's default reset (unlock, close cursors, UNLISTEN, RESET ALL)
                    # is a round trip on every release; these connections only run single
                    # autocommit reads and change no session state.
                    reset=_nothing_to_reset,
                    # With ``plan_each_call``, each execution is planned for its values.
                    # asyncpg prepares a statement once per connection, and after five
                    # executions PostgreSQL may keep a generic plan, made without the
                    # values: a list page's filters (a window of dates, a common or a rare
                    # word) then kept a plan made for a guess, tens of times slower in a
                    # large org (docs/engineering-log.md, *Issue 24*, size). Planning
                    # anew costs every call, so the statements whose plans do not depend on
                    # their values (a get, a plain page) keep generic plans, on a pool of
                    # their own.
                    server_settings=self._server_settings,
                    # A pooled connection's idle server session is closed after this long.
                    max_inactive_connection_lifetime=60.0,
                )
        return self._pool

    async def close(self) -> None:
        if self._pool is not None:
            pool, self._pool = self._pool, None
            await pool.close()


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
