"""The query runner: prepared statements of the hot request path run outside any
session, past SQLAlchemy's execution machinery.

Why: on a get, that machinery (session, pool checkout, execution context, result and
entity loading) cost many times what SQLite takes to answer the query, and as much again
for the authentication query of every call (``make bench``, scenario get). The SQL is
still written with SQLAlchemy Core and compiled by the dialect (``statements``); only the
execution is direct:

- SQLite: on one connection kept for these reads, in autocommit mode, so each statement
  reads the latest committed state (WAL) in a transaction of its own. Calls complete on
  the event loop's thread without yielding (as every SQLite call does here, see
  ``sqlite_driver``), so one connection serves every concurrent request.
- PostgreSQL: on asyncpg directly (``asyncpg_connections``), on a small pool of connections in
  autocommit mode, so a read is one round trip with no ``BEGIN``/``COMMIT`` around it, and
  asyncpg's own statement cache prepares each statement once per connection.

Statements inside a session's transaction go through ``session_io`` instead.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from signoff.storage.asyncpg_connections import ReadPool
from signoff.storage.prepared.statements import PreparedQuery
from signoff.storage.sqlite_driver import Retrier, open_sqlite, threaded


async def through_sqlalchemy(
    connection: AsyncConnection, query: PreparedQuery, params: Mapping[str, Any]
) -> tuple[list[Any], int]:
    """``query``'s rows, and how many rows it changed, through SQLAlchemy's execution on
    ``connection`` (the measurement switch ``STOCK_EXECUTION_SWITCH``): the SQL compiled
    once as before, run by ``exec_driver_sql``, its execution context and result."""
    dialect = connection.dialect
    compiled = (
        query.for_sqlite(dialect) if dialect.name == "sqlite" else query.for_postgres(dialect)
    )
    values = tuple(compiled.parameters(params))
    result = await connection.exec_driver_sql(compiled.sql, values)
    rows = [compiled.row(raw) for raw in result.all()] if query.keys else []
    return rows, result.rowcount


async def _rows_through(
    pooled: AsyncConnection, query: PreparedQuery, params: Mapping[str, Any]
) -> list[Any]:
    rows, _ = await through_sqlalchemy(pooled, query, params)
    return rows


T = TypeVar("T")


class QueryRunner:
    """Runs prepared queries for one database, outside any session: see the module's
    docstring."""

    def __init__(
        self,
        engine: AsyncEngine,
        sqlite_url: str | None,
        busy_timeout: float,
        postgres: ReadPool | None = None,
        postgres_planned_per_call: ReadPool | None = None,
        *,
        through_engine: bool = False,
    ) -> None:
        """``postgres_planned_per_call``: the pool of reads whose best plan depends on
        their values (``snapshot_read``'s ``plan_each_call``). ``through_engine``: the
        measurement switch ``STOCK_EXECUTION_SWITCH``, every read through SQLAlchemy's
        pooled connections (on SQLite, ``commit_stamp`` still answers)."""
        self._engine = engine
        self._dialect = engine.dialect
        self._sqlite_url = sqlite_url
        self._through_engine = through_engine or (sqlite_url is None and postgres is None)
        self._postgres = postgres
        self._postgres_planned_per_call = postgres_planned_per_call or postgres
        self._retrier = Retrier(busy_timeout)
        # The inline driver's measurement switch: these reads handed to a thread too.
        self._thread = ThreadPoolExecutor(max_workers=1) if sqlite_url and threaded() else None
        self._connection: sqlite3.Connection | None = None
        self._connections_opened = 0

    @property
    def through_engine(self) -> bool:
        """Whether reads go through SQLAlchemy's pooled connections (see ``__init__``)."""
        return self._through_engine

    @property
    def dialect_name(self) -> str:
        return str(self._dialect.name)

    async def all(self, query: PreparedQuery, params: Mapping[str, Any]) -> list[Any]:
        if self._postgres is not None:
            compiled = query.for_postgres(self._dialect)
            values = compiled.parameters(params)
            records = await self._postgres.fetch(lambda pg: pg.fetch(compiled.sql, *values))
            return [compiled.row(record) for record in records]
        if self._through_engine:
            async with self._engine.connect() as pooled:
                return await _rows_through(pooled, query, params)
        compiled = query.for_sqlite(self._dialect)
        values = compiled.parameters(params)
        sqlite = self._sqlite_connection()
        raw_rows = await self._run_sqlite(lambda: sqlite.execute(compiled.sql, values).fetchall())
        return [compiled.row(raw) for raw in raw_rows]

    async def snapshot_read(
        self, *statements: tuple[PreparedQuery, Mapping[str, Any]], plan_each_call: bool = False
    ) -> list[list[Any]]:
        """The rows of each statement: on SQLite in one transaction, one snapshot (a page
        and its total agree); on PostgreSQL on one connection, each statement with a
        snapshot of its own, as in a READ COMMITTED transaction (a session's reads).

        ``plan_each_call``: on PostgreSQL, the statements' plans depend on their values
        (filters, words): each call is planned for its own (``ReadPool``)."""
        return await self.snapshot_read_then_choose(
            list(statements), lambda _: [], plan_each_call=plan_each_call
        )

    async def snapshot_read_then_choose(
        self,
        first: Sequence[tuple[PreparedQuery, Mapping[str, Any]]],
        then: Callable[[list[list[Any]]], Sequence[tuple[PreparedQuery, Mapping[str, Any]]]],
        *,
        plan_each_call: bool = False,
    ) -> list[list[Any]]:
        """As ``snapshot_read``: the rows of ``first``'s statements, then of the
        statements ``then`` chooses from those rows, in the same read. ``then`` must not
        block: on SQLite it runs inside the read."""
        pool = self._postgres_planned_per_call if plan_each_call else self._postgres
        if pool is not None:
            dialect = self._dialect

            async def on_one_connection(pg: Any) -> list[list[Any]]:
                async def rows_of(query: PreparedQuery, params: Mapping[str, Any]) -> list[Any]:
                    compiled = query.for_postgres(dialect)
                    records = await pg.fetch(compiled.sql, *compiled.parameters(params))
                    return [compiled.row(record) for record in records]

                results = [await rows_of(query, params) for query, params in first]
                for query, params in then(results):
                    results.append(await rows_of(query, params))
                return results

            rows: list[list[Any]] = await pool.fetch(on_one_connection)
            return rows
        if self._through_engine:
            async with self._engine.connect() as pooled:
                results = [await _rows_through(pooled, query, params) for query, params in first]
                for query, params in then(results):
                    results.append(await _rows_through(pooled, query, params))
                return results
        sqlite = self._sqlite_connection()
        dialect = self._dialect

        def rows_of(
            statements: Sequence[tuple[PreparedQuery, Mapping[str, Any]]],
        ) -> list[list[Any]]:
            results = []
            for query, params in statements:
                compiled = query.for_sqlite(dialect)
                raw_rows = sqlite.execute(compiled.sql, compiled.parameters(params)).fetchall()
                results.append([compiled.row(raw) for raw in raw_rows])
            return results

        def read() -> list[list[Any]]:
            # One synchronous call: no other coroutine's read can join this transaction.
            sqlite.execute("BEGIN")
            try:
                results = rows_of(first)
                return results + rows_of(then(results))
            finally:
                sqlite.execute("COMMIT")  # ends a read: nothing to write

        return await self._run_sqlite(read)

    async def _run_sqlite(self, call: Callable[[], T]) -> T:
        if self._thread is None:
            return await self._retrier.run(call)
        return await self._retrier.run_on(self._thread, call)

    async def one(self, query: PreparedQuery, params: Mapping[str, Any]) -> Any | None:
        rows = await self.all(query, params)
        return rows[0] if rows else None

    async def run_sql(self, sql: str, values: Sequence[Any]) -> Any:
        """PostgreSQL: ``sql`` (already compiled), in autocommit, on this runner's pool;
        its first row (None if it answers none)."""
        assert self._postgres is not None
        return await self._postgres.fetch(lambda pg: pg.fetchrow(sql, *values))

    @property
    def is_autocommit(self) -> bool:
        """Whether a statement run here is a transaction of its own (PostgreSQL: the
        pool's connections are in autocommit), so ``execute_alone`` may write here."""
        return self._postgres is not None

    def commit_stamp(self) -> tuple[int, int] | None:
        """On SQLite, a stamp that changes whenever any other connection commits (or
        checkpoints): this process's writers, a CLI, another process. It is
        ``PRAGMA data_version`` (it reads no table) read on this runner's own connection, which
        only reads, so every commit anywhere changes it; the number of that connection
        comes first, as a new connection counts afresh. None on PostgreSQL, which has
        nothing as cheap, and None if SQLite cannot answer: then the caller reads afresh."""
        if self._sqlite_url is None:
            return None
        try:
            row = self._sqlite_connection().execute("PRAGMA data_version").fetchone()
        except sqlite3.Error:
            return None
        return self._connections_opened, int(row[0])

    def _sqlite_connection(self) -> sqlite3.Connection:
        if self._connection is None:
            assert self._sqlite_url is not None
            connection = open_sqlite(self._sqlite_url)
            # Autocommit: each statement is a read transaction of its own, never left open.
            connection.isolation_level = None
            connection.execute("PRAGMA query_only=ON")
            self._connection = connection
            self._connections_opened += 1
        return self._connection

    async def close(self) -> None:
        if self._thread is not None:
            self._thread.shutdown(wait=True)
        if self._connection is not None:
            self._connection.close()
            self._connection = None
        if self._postgres is not None:
            await self._postgres.close()
        if self._postgres_planned_per_call not in (None, self._postgres):
            await self._postgres_planned_per_call.close()
