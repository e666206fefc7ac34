"""Session I/O: prepared statements run inside a session's transaction, on the
connection under it, so they commit or roll back with the rest of the unit of work.

- SQLite: straight on the driver connection of the transaction (``group_commit`` names
  it in the session, ``SQLITE_CONNECTION_KEY``).
- PostgreSQL: on the asyncpg connection under the transaction. A write transaction's
  session (``QueuingSession``) may hold writes queued for it (``write_batching``): they go
  out before any other statement of the session, so every statement sees them, and a
  rollback forgets them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import event
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession
from sqlalchemy.orm import ORMExecuteState, Session
from sqlalchemy.util import await_only

from signoff.storage.asyncpg_connections import asyncpg_in_transaction, asyncpg_under
from signoff.storage.prepared.runner import QueryRunner, through_sqlalchemy
from signoff.storage.prepared.statements import (
    STOCK_EXECUTION_SWITCH,
    Compiled,
    PreparedQuery,
    combined_sql,
    switched,
)
from signoff.storage.sqlite_driver import InlineConnection

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


@dataclass(frozen=True)
class QueuedWrite:
    compiled: Compiled
    values: list[Any]
    # Raised (by ``send_queued_writes``) unless the write changed exactly one row.
    unless_one_row: Callable[[], Exception] | None
    # The key of the session's ``info`` set to True if the write changed any row.
    marks: str | None = None


def mark_written(session: AsyncSession | Session, marks: str | None, changed: int) -> None:
    """Set the session's ``marks`` key if the write changed a row (``queue_write``)."""
    if marks is not None and changed:
        session.info[marks] = True


def discard_queued_writes(session: AsyncSession | Session) -> None:
    """Forget the queued writes: the transaction (or savepoint) they belong to rolled back."""
    session.info.pop(QUEUED_WRITES_KEY, None)


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
        await_only(send_queued(session, asyncpg_under(session.connection())))


async def send_queued(session: AsyncSession | Session, pg: Any) -> None:
    """Send the session's queued writes on ``pg``, the connection under its transaction:
    one as itself, several as one statement (``combined_sql``)."""
    queued: list[QueuedWrite] | None = session.info.pop(QUEUED_WRITES_KEY, None)
    if not queued:
        return
    if len(queued) == 1:
        write = queued[0]
        counts = [rows_changed(await pg.execute(write.compiled.sql, *write.values))]
    else:
        sql, values = _one_statement(queued)
        counts = list(await pg.fetchrow(sql, *values))
    for write, count in zip(queued, counts, strict=True):
        if write.unless_one_row is not None and count != 1:
            raise write.unless_one_row()
        mark_written(session, write.marks, count)


def _one_statement(queued: Sequence[QueuedWrite]) -> tuple[str, list[Any]]:
    sql = combined_sql(tuple(write.compiled for write in queued))
    return sql, [value for write in queued for value in write.values]


# Set on a session whose writes went out in autocommit on ``QueryRunner``'s connections,
# where the triggers leave their NOTIFYs to the process (migration 0019): its caller sends
# them after the transaction (``notifies_left_to_caller``).
NOTIFIES_LEFT_KEY = "signoff.storage.notifies_left_to_caller"
# Set in ``session.info`` by the sessions of a database made with the measurement switch
# ``STOCK_EXECUTION_SWITCH`` (``Database``): read there, not in the environment at each
# statement (an environment lookup per statement was a share of a create's CPU).
STOCK_EXECUTION_KEY = "signoff.storage.stock_execution"


def stock_execution_info() -> dict[str, Any]:
    """What a database's sessions carry in ``info``: whether the switch was set when the
    database was made."""
    return {STOCK_EXECUTION_KEY: True} if switched(STOCK_EXECUTION_SWITCH) else {}


async def execute_in(
    session: AsyncSession, query: PreparedQuery, params: Mapping[str, Any]
) -> list[Any]:
    """Run ``query`` in the session's transaction; its rows (RETURNING), if any.

    On SQLite straight on the driver connection, as ``QueryRunner`` does; the session's
    connection (and with it the transaction, ``BEGIN IMMEDIATE`` for writers) is taken
    first, so the statement commits or rolls back with everything else in the session.
    """
    if STOCK_EXECUTION_KEY in session.info:
        rows, _ = await _through_sqlalchemy(session, query, params)
        return query.rows_of(rows)
    sqlite = await sqlite_transaction_of(session)
    if sqlite is None:
        pg, dialect = await asyncpg_of(session)
        compiled = query.for_postgres(dialect)
        await send_queued(session, pg)
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
    if queries is not None and queries.is_autocommit and not session.in_transaction():
        session.info[NOTIFIES_LEFT_KEY] = True
        return await queries.all(query, params)
    return await execute_in(session, query, params)


def notifies_left_to_caller(session: AsyncSession) -> bool:
    """Whether the session wrote in autocommit on the hot path's PostgreSQL connections
    (``execute_alone``, ``writes_alone``), whose triggers send no NOTIFY: the caller
    sends them once the transaction is over (``AppContext.transaction``)."""
    return bool(session.info.get(NOTIFIES_LEFT_KEY, False))


async def count_in(session: AsyncSession, query: PreparedQuery, params: Mapping[str, Any]) -> int:
    """Run a write without RETURNING in the session's transaction; the rows it changed.

    On SQLite, ``RETURNING`` costs more than the insert it returns from, so writes whose
    caller already holds the values ask only whether a row was written.
    """
    if STOCK_EXECUTION_KEY in session.info:
        _, changed = await _through_sqlalchemy(session, query, params)
        return changed
    sqlite = await sqlite_transaction_of(session)
    if sqlite is None:
        pg, dialect = await asyncpg_of(session)
        compiled = query.for_postgres(dialect)
        await send_queued(session, pg)
        status: str = await pg.execute(compiled.sql, *compiled.parameters(params))
        return rows_changed(status)
    compiled = query.for_sqlite(sqlite.dialect)
    values = compiled.parameters(params)
    return await sqlite.driver.run(lambda db: db.execute(compiled.sql, values).rowcount)


async def _through_sqlalchemy(
    session: AsyncSession, query: PreparedQuery, params: Mapping[str, Any]
) -> tuple[list[Any], int]:
    """``query`` through SQLAlchemy's execution on the session's connection, for the
    measurement switch only (``STOCK_EXECUTION_SWITCH``): its rows, and how many rows it
    changed. Writes queued for the session go out first, as before any statement."""
    if session.info.get(QUEUED_WRITES_KEY):
        await session.run_sync(_send_from_sync)
    connection = await session.connection()
    return await through_sqlalchemy(connection, query, params)


def holds_sqlite_write_lock(session: AsyncSession) -> bool:
    """Whether the session is a SQLite write transaction (``group_commit``), which holds
    the database's one write lock from its ``BEGIN IMMEDIATE``: what it reads cannot
    change before it commits, whoever else writes (another process waits)."""
    return SQLITE_CONNECTION_KEY in session.info


async def sqlite_transaction_of(session: AsyncSession) -> SQLiteTransaction | None:
    """The SQLite connection under the session's transaction (None on PostgreSQL).

    A write transaction names it in the session (``SQLITE_CONNECTION_KEY``): asking
    SQLAlchemy for it before each statement was a visible share of a decision's time
    (``make bench``, scenario decide).
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


async def asyncpg_of(session: AsyncSession) -> tuple[Any, Dialect]:
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


def rows_changed(status: str) -> int:
    """The row count of a PostgreSQL command tag: ``UPDATE 3``, ``INSERT 0 1``."""
    last = status.rpartition(" ")[2]
    return int(last) if last.isdigit() else 0
