"""Statements of the hot request path, compiled once and run past the ORM.

Why: on a get, SQLAlchemy's execution machinery (session, pool checkout, execution
context, result and entity loading) cost many times what SQLite takes to answer the
query, and as much again for the authentication query of every call (``make bench``,
scenario get; docs/engineering-log.md, *The second round*). The SQL is still written
with SQLAlchemy Core and compiled by the dialect; only the execution is direct:

- SQLite: on one connection kept for these reads, in autocommit mode, so each statement
  reads the latest committed state (WAL) in a transaction of its own. Calls complete on
  the event loop's thread without yielding (as every SQLite call does here, see
  ``sqlite_driver``), so one connection serves every concurrent request. Values are
  converted with the very bind and result processors SQLAlchemy would use, so rows read
  here equal rows read through the ORM.
- PostgreSQL: on asyncpg directly (``asyncpg_shape``), on a small pool of connections in
  autocommit mode, so a read is one round trip with no ``BEGIN``/``COMMIT`` around it, and
  asyncpg's own statement cache prepares each statement once per connection. Values are
  converted with SQLAlchemy's processors, as on SQLite.

Writes (``execute_in``, ``count_in``) run inside a session's transaction, on its own
connection (on PostgreSQL, the asyncpg connection under it): they commit or roll back
with the rest of the unit of work.

Rows are tuples whose fields are named by the statement's column labels.
"""

from __future__ import annotations

import contextlib
import functools
import re
import sqlite3
from collections import namedtuple
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import Label, Select, event, inspect
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession
from sqlalchemy.orm import ORMExecuteState, Session
from sqlalchemy.sql.dml import UpdateBase
from sqlalchemy.util import await_only

from signoff.storage.asyncpg_shape import ReadPool, asyncpg_in_transaction, asyncpg_under
from signoff.storage.sqlite_driver import InlineConnection, Retrier, open_sqlite

Processor = Callable[[Any], Any] | None


def entity_columns(entity: type[Any]) -> list[Label[Any]]:
    """Every column of a mapped class, labelled with its attribute name (``metadata_``),
    so a row read here has the fields an ORM entity has."""
    mapper = inspect(entity)
    return [prop.columns[0].label(prop.key) for prop in mapper.column_attrs]


class PreparedQuery:
    """A Core statement with named parameters: a ``SELECT``, or a write whose ``RETURNING``
    columns (if any) are labelled as its rows' field names.

    Every value must come with the call or be fixed in the statement: column defaults
    computed by SQLAlchemy at execution are not applied here, so writes name every column.
    """

    def __init__(
        self,
        statement: Select[*tuple[Any, ...]] | UpdateBase,
        *,
        column_keys: Sequence[str] | None = None,
        sqlite_indexes: Sequence[SQLiteIndex] = (),
        row_type: type[tuple[Any, ...]] | None = None,
    ) -> None:
        """``column_keys``: for an ``INSERT`` without ``values()``, the columns each call
        gives, as its parameters of the same names. ``sqlite_indexes``: how SQLite must read
        the statement's tables, where its planner would choose worse (SQLAlchemy renders
        no table hints for SQLite). ``row_type``: a ``NamedTuple`` whose fields are the
        statement's column labels, in order, to build each row as (else a plain one)."""
        self.statement = statement
        self.column_keys = list(column_keys) if column_keys is not None else None
        self.sqlite_indexes = tuple(sqlite_indexes)
        self.keys = tuple(str(column.key) for column in statement.exported_columns)
        if row_type is not None and getattr(row_type, "_fields", None) != self.keys:
            raise TypeError(f"{row_type.__name__}'s fields are not the columns {self.keys}")
        self.row_type: type[tuple[Any, ...]] = row_type or namedtuple("Row", self.keys)
        self._typed = row_type is not None
        self._sqlite: _Compiled | None = None
        self._postgres: _Compiled | None = None

    def rows_of(self, rows: Sequence[Any]) -> list[Any]:
        """Rows SQLAlchemy answered, as this query's ``row_type`` if it has one."""
        if self._typed:
            return [self.row_type(*row) for row in rows]
        return list(rows)

    def for_sqlite(self, dialect: Dialect) -> _Compiled:
        if self._sqlite is None:
            self._sqlite = _Compiled(self, dialect, self.sqlite_indexes)
        return self._sqlite

    def for_postgres(self, dialect: Dialect) -> _Compiled:
        if self._postgres is None:
            self._postgres = _Compiled(self, dialect, ())
        return self._postgres


@dataclass(frozen=True)
class SQLiteIndex:
    """How SQLite must read one table of a statement: through the index ``name``
    (``INDEXED BY``), or with no name, through rowid lookups only (``NOT INDEXED``).
    ``table`` as the statement's ``FROM`` names it: ``requests`` or ``requests AS r``."""

    table: str
    name: str | None

    def applied_to(self, sql: str) -> str:
        """``sql`` with the clause after the table's one ``FROM``; an error if the table
        is not read exactly once so, where the hint would be ambiguous."""
        clause = f"INDEXED BY {self.name}" if self.name else "NOT INDEXED"
        from_table = re.compile(rf"\bFROM {re.escape(self.table)}\b(?! AS)")
        hinted, count = from_table.subn(f"FROM {self.table} {clause}", sql)
        if count != 1:
            raise ValueError(f"expected one FROM {self.table} in: {sql}")
        return hinted


class _Compiled:
    """The SQL text, the order of its parameters, and the value conversions both ways."""

    def __init__(
        self, query: PreparedQuery, dialect: Dialect, sqlite_indexes: Sequence[SQLiteIndex]
    ) -> None:
        compiled = query.statement.compile(dialect=dialect, column_keys=query.column_keys)
        if compiled.positiontup is None:  # pragma: no cover - qmark and numeric_dollar are
            raise TypeError("expected a positional parameter style")
        if compiled.post_compile_params:
            # An IN list expanded per call: build the statement with one parameter each.
            raise TypeError(f"expanding parameters are not supported: {compiled}")
        if compiled.insert_prefetch or compiled.update_prefetch:
            # Defaults SQLAlchemy computes per execution (ids, timestamps) would be skipped.
            raise TypeError(f"the call must give every column with a default: {compiled}")
        sql = compiled.string
        for index in sqlite_indexes:
            sql = index.applied_to(sql)
        self.sql = sql
        self.names: tuple[str, ...] = tuple(compiled.positiontup)
        binds = compiled.binds  # by their names in the SQL: anonymous ones made unique
        # Values fixed in the statement itself: a literal in a WHERE clause, a column's
        # constant default.
        self.fixed = {name: bind.value for name, bind in binds.items() if not bind.required}
        self.bind_processors: tuple[Processor, ...] = tuple(
            binds[name].type.dialect_impl(dialect).bind_processor(dialect) for name in self.names
        )
        result_processors = (
            column.type.dialect_impl(dialect).result_processor(dialect, None)
            for column in query.statement.exported_columns
        )
        # Only the columns whose values are converted are visited per row: on PostgreSQL,
        # where asyncpg decodes most types itself, a request's timestamps of its 27 columns.
        self.converted: tuple[tuple[int, Callable[[Any], Any]], ...] = tuple(
            (index, process)
            for index, process in enumerate(result_processors)
            if process is not None
        )
        self.row_type = query.row_type

    def parameters(self, params: Mapping[str, Any]) -> list[Any]:
        values = []
        for name, process in zip(self.names, self.bind_processors, strict=True):
            value = params[name] if name in params else self.fixed[name]
            values.append(process(value) if process is not None and value is not None else value)
        return values

    def row(self, raw: Sequence[Any]) -> tuple[Any, ...]:
        values = list(raw)
        for index, process in self.converted:
            values[index] = process(values[index])
        made: tuple[Any, ...] = self.row_type._make(values)  # type: ignore[attr-defined]
        return made


class QueryRunner:
    """Runs prepared queries for one database: see the module's docstring."""

    def __init__(
        self,
        engine: AsyncEngine,
        sqlite_url: str | None,
        busy_timeout: float,
        postgres: ReadPool | None = None,
        postgres_planned_per_call: ReadPool | None = None,
    ) -> None:
        """``postgres_planned_per_call``: the pool of reads whose best plan depends on
        their values (``snapshot_read``'s ``plan_each_call``)."""
        self._engine = engine
        self._dialect = engine.dialect
        self._sqlite_url = sqlite_url
        self._postgres = postgres
        self._postgres_planned_per_call = postgres_planned_per_call or postgres
        self._retrier = Retrier(busy_timeout)
        self._connection: sqlite3.Connection | None = None
        self._connections_opened = 0

    @property
    def dialect_name(self) -> str:
        return str(self._dialect.name)

    async def all(self, query: PreparedQuery, params: Mapping[str, Any]) -> list[Any]:
        if self._postgres is not None:
            compiled = query.for_postgres(self._dialect)
            values = compiled.parameters(params)
            records = await self._postgres.fetch(lambda pg: pg.fetch(compiled.sql, *values))
            return [compiled.row(record) for record in records]
        if self._sqlite_url is None:
            async with self._engine.connect() as pooled:
                result = await pooled.execute(query.statement, params)
                return query.rows_of(result.all())
        compiled = query.for_sqlite(self._dialect)
        values = compiled.parameters(params)
        sqlite = self._sqlite_connection()
        raw_rows = await self._retrier.run(lambda: sqlite.execute(compiled.sql, values).fetchall())
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
        if self._sqlite_url is None:
            async with self._engine.connect() as pooled:
                results = [
                    query.rows_of((await pooled.execute(query.statement, params)).all())
                    for query, params in first
                ]
                for query, params in then(results):
                    answered = (await pooled.execute(query.statement, params)).all()
                    results.append(query.rows_of(answered))
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

        return await self._retrier.run(read)

    async def one(self, query: PreparedQuery, params: Mapping[str, Any]) -> Any | None:
        rows = await self.all(query, params)
        return rows[0] if rows else None

    async def run_sql(self, sql: str, values: Sequence[Any]) -> Any:
        """PostgreSQL: ``sql`` (already compiled), in autocommit, on this runner's pool;
        its first row (None if it answers none)."""
        assert self._postgres is not None
        return await self._postgres.fetch(lambda pg: pg.fetchrow(sql, *values))

    @property
    def autocommits(self) -> bool:
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
        if self._connection is not None:
            self._connection.close()
            self._connection = None
        if self._postgres is not None:
            await self._postgres.close()
        if self._postgres_planned_per_call not in (None, self._postgres):
            await self._postgres_planned_per_call.close()


# Where a write transaction's session names the SQLite connection under it (set by
# ``group_commit``, which holds that connection until the transaction ends).
SQLITE_CONNECTION_KEY = "signoff.sqlite_connection"


@dataclass(frozen=True)
class SQLiteTransaction:
    """The SQLite connection under a session's transaction, and its dialect."""

    driver: InlineConnection
    dialect: Dialect


# Where a PostgreSQL write transaction's session holds the writes queued for it
# (``queue_write``), in order.
QUEUED_WRITES_KEY = "signoff.queued_writes"
_PLACEHOLDER = re.compile(r"\$(\d+)")


@dataclass(frozen=True)
class _QueuedWrite:
    compiled: _Compiled
    values: list[Any]
    # Raised (by ``send_queued_writes``) unless the write changed exactly one row.
    unless_one_row: Callable[[], Exception] | None
    # The key of the session's ``info`` set to True if the write changed any row.
    marks: str | None = None


async def queue_write(
    session: AsyncSession,
    query: PreparedQuery,
    params: Mapping[str, Any],
    *,
    unless_one_row: Callable[[], Exception] | None = None,
    marks: str | None = None,
) -> None:
    """Run a write (no ``RETURNING``) whose caller needs no answer now, in the session's
    transaction: on SQLite at once; on PostgreSQL with the transaction's other queued
    writes, as one statement, before its next statement or its commit.

    Why: on PostgreSQL each statement is a round trip, and a decision's writes (the
    request's compare-and-set, the vote, the audit event, the reminders it cancels) ask
    nothing of each other: sent together they are one round trip instead of four.
    ``unless_one_row``: the error to raise if the write changed no row or several (a
    compare-and-set), then or when the queue is sent. ``marks``: a key of the session's
    ``info`` set to True once the write is known to have changed a row (a conditional
    write whose caller acts after the commit only if it wrote): the row counts come back
    with the writes, so asking costs nothing more.
    """
    if isinstance(session.sync_session, QueuingSession):
        compiled = query.for_postgres(session.sync_session.bind.dialect)  # type: ignore[union-attr]
        queued = session.info.setdefault(QUEUED_WRITES_KEY, [])
        queued.append(_QueuedWrite(compiled, compiled.parameters(params), unless_one_row, marks))
        return
    changed = await count_in(session, query, params)
    if unless_one_row is not None and changed != 1:
        raise unless_one_row()
    _mark(session, marks, changed)


def _mark(session: AsyncSession | Session, marks: str | None, changed: int) -> None:
    if marks is not None and changed:
        session.info[marks] = True


def discard_queued_writes(session: AsyncSession | Session) -> None:
    """Forget the queued writes: the transaction (or savepoint) they belong to rolled back."""
    session.info.pop(QUEUED_WRITES_KEY, None)


async def send_queued_writes(session: AsyncSession) -> None:
    """Send the session's queued writes (PostgreSQL), as one statement: each a
    data-modifying ``WITH`` of its own, the statement answering how many rows each
    changed. They see one snapshot and none sees another's changes, which is why only
    writes that ask nothing of each other are queued (``queue_write``). Inside
    ``writes_alone``, as that statement, in autocommit."""
    if session.info.get(QUEUED_WRITES_KEY):
        alone: QueryRunner | None = session.info.get(WRITES_ALONE_KEY)
        if alone is not None:
            await _send_alone(session, alone)
            return
        pg, _ = await _asyncpg_of(session)
        await _send_queued(session, pg)


# Where a session inside ``writes_alone`` keeps the runner its writes go out on.
WRITES_ALONE_KEY = "signoff.writes_alone"
# Set on a session whose writes went out in autocommit on ``QueryRunner``'s connections,
# where the triggers leave their NOTIFYs to the process (migration 0019): its caller sends
# them after the transaction (``notifies_left_to_caller``).
_NOTIFIES_LEFT_KEY = "signoff.storage.notifies_left_to_caller"
# What PostgreSQL answers when ``signoff_lost_race()`` (migration 0017) gives a statement
# up, and when a row another writer committed meanwhile takes a unique key: both mean the
# state the writes were computed from has changed.
_RACE_LOST_STATES = frozenset({"40001", "23505"})


class LostRace(Exception):
    """Writes computed from a state that has changed since it was read were not made
    (``writes_alone``): nothing of them was written; read again and retry."""


@contextlib.asynccontextmanager
async def writes_alone(session: AsyncSession, queries: QueryRunner) -> AsyncIterator[None]:
    """PostgreSQL: the writes queued in this block go out, at its end (or at a flush), as
    one statement that is a transaction of its own, in autocommit on ``queries``'
    connections: no ``BEGIN``, no ``COMMIT``, one round trip. It writes all or nothing:
    should a write queued with ``unless_one_row`` (a compare-and-set) change no row or
    several, the statement fails inside PostgreSQL (``signoff_lost_race``, migration
    0017), nothing is written, and ``LostRace`` is raised (never ``unless_one_row``'s
    error: the state the writes were made from has changed, and the caller reads again).

    Only for a session that has begun nothing, whose block queues every write it makes
    (``queue_write``) and reads nothing through the session."""
    if session.in_transaction() or not queries.autocommits:
        raise RuntimeError("writes_alone needs a PostgreSQL session that has begun nothing")
    session.info[WRITES_ALONE_KEY] = queries
    session.info[_NOTIFIES_LEFT_KEY] = True
    try:
        async with _sent_when_done(session):
            yield
    finally:
        session.info.pop(WRITES_ALONE_KEY, None)


@contextlib.asynccontextmanager
async def _sent_when_done(session: AsyncSession) -> AsyncIterator[None]:
    """The writes the block queues are sent when it ends, or forgotten if it raises."""
    try:
        yield
        await send_queued_writes(session)
    except BaseException:
        discard_queued_writes(session)
        raise


async def _send_alone(session: AsyncSession, queries: QueryRunner) -> None:
    queued: list[_QueuedWrite] = session.info.pop(QUEUED_WRITES_KEY, None) or []
    checked = tuple(write.unless_one_row is not None for write in queued)
    sql = _all_or_nothing_sql(tuple(write.compiled for write in queued), checked)
    values = [value for write in queued for value in write.values]
    try:
        counts = await queries.run_sql(sql, values)
    except Exception as exc:
        if getattr(exc, "sqlstate", None) in _RACE_LOST_STATES:
            raise LostRace() from exc
        raise
    # Written: the statement answers each write's row count, in order.
    for write, count in zip(queued, counts, strict=True):
        _mark(session, write.marks, count)


@functools.lru_cache(maxsize=256)
def _all_or_nothing_sql(statements: tuple[_Compiled, ...], checked: tuple[bool, ...]) -> str:
    """``_combined_sql``'s statement, given up as a whole (``signoff_lost_race``) unless
    every ``checked`` write changed exactly one row."""
    if not any(checked):
        return _combined_sql(statements)
    listed = ", ".join(f"{count} AS c{i}" for i, count in enumerate(_row_counts(len(checked))))
    one_each = " AND ".join(f"c{i} = 1" for i, check in enumerate(checked) if check)
    return (
        f"{_with_writes(statements)} SELECT * FROM (SELECT {listed}) AS counts"  # noqa: S608
        f" WHERE CASE WHEN {one_each} THEN true ELSE signoff_lost_race() END"
    )


@contextlib.asynccontextmanager
async def savepoint(session: AsyncSession) -> AsyncIterator[None]:
    """A savepoint: what a block writes inside it is undone alone if the block raises.

    Writes queued before the savepoint belong outside it, so they are sent first; those
    queued inside are sent before it is released, or forgotten with it."""
    await send_queued_writes(session)
    async with session.begin_nested():
        # SQLAlchemy emits SAVEPOINT when the session next uses its connection, and the
        # prepared writes bypass the session: ask for the connection, so it is set.
        await session.connection()
        async with _sent_when_done(session):
            yield


class QueuingSession(Session):
    """The session of a PostgreSQL write transaction: its queued writes are sent before
    any statement it runs itself (the ORM's, a flush) and before it commits, so every
    statement sees them; a rollback forgets them."""


@event.listens_for(QueuingSession, "do_orm_execute")
def _before_statement(state: ORMExecuteState) -> None:
    _send_from_sync(state.session)


@event.listens_for(QueuingSession, "before_flush")
def _before_flush(session: Session, _context: Any, _instances: Any) -> None:
    _send_from_sync(session)


@event.listens_for(QueuingSession, "before_commit")
def _before_commit(session: Session) -> None:
    _send_from_sync(session)


@event.listens_for(QueuingSession, "after_transaction_end")
def _after_transaction(session: Session, transaction: Any) -> None:
    if transaction.parent is None:  # the connection goes back to the pool
        session.info.pop(ASYNCPG_CONNECTION_KEY, None)


@event.listens_for(QueuingSession, "after_soft_rollback")
def _after_rollback(session: Session, _previous: Any) -> None:
    discard_queued_writes(session)


def _send_from_sync(session: Session) -> None:
    """``send_queued_writes`` from SQLAlchemy's synchronous side (an event, which runs
    in the greenlet of the session's async call, where ``await_only`` may wait)."""
    if session.info.get(QUEUED_WRITES_KEY):
        await_only(_send_queued(session, asyncpg_under(session.connection())))


async def _send_queued(session: AsyncSession | Session, pg: Any) -> None:
    queued: list[_QueuedWrite] | None = session.info.pop(QUEUED_WRITES_KEY, None)
    if not queued:
        return
    if len(queued) == 1:
        write = queued[0]
        counts = [_rows_changed(await pg.execute(write.compiled.sql, *write.values))]
    else:
        sql, values = _one_statement(queued)
        counts = list(await pg.fetchrow(sql, *values))
    for write, count in zip(queued, counts, strict=True):
        if write.unless_one_row is not None and count != 1:
            raise write.unless_one_row()
        _mark(session, write.marks, count)


def _one_statement(queued: Sequence[_QueuedWrite]) -> tuple[str, list[Any]]:
    sql = _combined_sql(tuple(write.compiled for write in queued))
    return sql, [value for write in queued for value in write.values]


@functools.lru_cache(maxsize=256)
def _combined_sql(statements: tuple[_Compiled, ...]) -> str:
    """The writes as one statement (their parameters renumbered in order): a decision
    sends one of a few combinations, each built once."""
    counts = ", ".join(_row_counts(len(statements)))
    return f"{_with_writes(statements)} SELECT {counts}"


def _with_writes(statements: tuple[_Compiled, ...]) -> str:
    """``WITH w0 AS (write RETURNING 1), w1 AS (...)``: the writes' parameters renumbered
    in order."""
    parts, offset = [], 0
    for index, compiled in enumerate(statements):
        shift = offset  # bound now, for the substitution below

        def renumbered(match: re.Match[str], shift: int = shift) -> str:
            return f"${int(match.group(1)) + shift}"

        parts.append(f"w{index} AS ({_PLACEHOLDER.sub(renumbered, compiled.sql)} RETURNING 1)")
        offset += len(compiled.names)
    return f"WITH {', '.join(parts)}"


def _row_counts(count: int) -> list[str]:
    return [f"(SELECT count(*) FROM w{i})" for i in range(count)]  # noqa: S608


async def execute_in(
    session: AsyncSession, query: PreparedQuery, params: Mapping[str, Any]
) -> list[Any]:
    """Run ``query`` in the session's transaction; its rows (RETURNING), if any.

    On SQLite straight on the driver connection, as ``QueryRunner`` does; the session's
    connection (and with it the transaction, ``BEGIN IMMEDIATE`` for writers) is taken
    first, so the statement commits or rolls back with everything else in the session.
    """
    sqlite = await sqlite_transaction_of(session)
    if sqlite is None:
        pg, dialect = await _asyncpg_of(session)
        compiled = query.for_postgres(dialect)
        await _send_queued(session, pg)
        records = await pg.fetch(compiled.sql, *compiled.parameters(params))
        return [compiled.row(record) for record in records] if query.keys else []
    compiled = query.for_sqlite(sqlite.dialect)
    values = compiled.parameters(params)
    raw_rows = await sqlite.driver.run(lambda db: db.execute(compiled.sql, values).fetchall())
    return [compiled.row(row) for row in raw_rows]


async def execute_alone(
    session: AsyncSession,
    queries: QueryRunner | None,
    query: PreparedQuery,
    params: Mapping[str, Any],
) -> list[Any]:
    """Run ``query``, the one write of the session's transaction; its rows.

    On PostgreSQL, while the session has begun nothing, in autocommit on ``queries``'
    connections: the statement is a transaction of its own, and the ``BEGIN`` and
    ``COMMIT`` round trips around it are saved (the session then commits nothing).
    Otherwise in the session's transaction, as ``execute_in``. The caller writes nothing
    else in that transaction: it would commit apart.
    """
    if queries is not None and queries.autocommits and not session.in_transaction():
        session.info[_NOTIFIES_LEFT_KEY] = True
        return await queries.all(query, params)
    return await execute_in(session, query, params)


def notifies_left_to_caller(session: AsyncSession) -> bool:
    """Whether the session wrote in autocommit on the hot path's PostgreSQL connections
    (``execute_alone``, ``writes_alone``), whose triggers send no NOTIFY: the caller
    sends them once the transaction is over (``AppContext.transaction``)."""
    return bool(session.info.get(_NOTIFIES_LEFT_KEY, False))


async def count_in(session: AsyncSession, query: PreparedQuery, params: Mapping[str, Any]) -> int:
    """Run a write without RETURNING in the session's transaction; the rows it changed.

    On SQLite, ``RETURNING`` costs more than the insert it returns from
    (docs/engineering-log.md, *The second round*), so writes whose caller already holds
    the values ask only whether a row was written.
    """
    sqlite = await sqlite_transaction_of(session)
    if sqlite is None:
        pg, dialect = await _asyncpg_of(session)
        compiled = query.for_postgres(dialect)
        await _send_queued(session, pg)
        status: str = await pg.execute(compiled.sql, *compiled.parameters(params))
        return _rows_changed(status)
    compiled = query.for_sqlite(sqlite.dialect)
    values = compiled.parameters(params)
    return await sqlite.driver.run(lambda db: db.execute(compiled.sql, values).rowcount)


async def sqlite_transaction_of(session: AsyncSession) -> SQLiteTransaction | None:
    """The SQLite connection under the session's transaction (None on PostgreSQL).

    A write transaction names it in the session (``SQLITE_CONNECTION_KEY``): asking
    SQLAlchemy for it before each statement was a visible share of a decision's time
    (``make bench``, scenario decide; docs/engineering-log.md, *The third round*).
    """
    named = session.info.get(SQLITE_CONNECTION_KEY)
    if named is not None:
        return cast(SQLiteTransaction, named)
    if session.bind is not None and session.bind.dialect.name != "sqlite":
        return None  # known without taking the connection
    connection = await session.connection()
    if connection.dialect.name != "sqlite":
        return None
    return SQLiteTransaction(await inline_driver(connection), connection.dialect)


# Where a PostgreSQL write transaction's session keeps the asyncpg connection under it,
# once begun: asking SQLAlchemy for it is a greenlet switch per statement.
ASYNCPG_CONNECTION_KEY = "signoff.asyncpg_connection"


async def _asyncpg_of(session: AsyncSession) -> tuple[Any, Dialect]:
    """The asyncpg connection under the session's transaction (begun), and the dialect."""
    kept = session.info.get(ASYNCPG_CONNECTION_KEY)
    if kept is not None:
        return kept, session.sync_session.bind.dialect  # type: ignore[union-attr]
    connection = await session.connection()
    pg = await asyncpg_in_transaction(connection)
    if isinstance(session.sync_session, QueuingSession):
        session.info[ASYNCPG_CONNECTION_KEY] = pg  # forgotten when the transaction ends
    return pg, connection.dialect


async def inline_driver(connection: AsyncConnection) -> InlineConnection:
    raw = await connection.get_raw_connection()
    driver = raw.driver_connection
    if not isinstance(driver, InlineConnection):  # pragma: no cover - db.py makes them all
        raise TypeError(f"expected an inline SQLite connection, got {type(driver).__name__}")
    return driver


def has_unflushed_changes(session: AsyncSession) -> bool:
    """Whether ``flush`` has anything to write.

    Why ask: a flush with nothing to write still runs in a greenlet of its own
    (SQLAlchemy's async bridge), whose stack is mapped and unmapped by two system calls,
    and the hot writers (a create, a vote, a chain's steps) write through prepared
    statements only, leaving the session empty.
    """
    return bool(session.new or session.deleted or session.dirty)


def _rows_changed(status: str) -> int:
    """The row count of a PostgreSQL command tag: ``UPDATE 3``, ``INSERT 0 1``."""
    last = status.rpartition(" ")[2]
    return int(last) if last.isdigit() else 0
