"""Write batching (PostgreSQL): writes that ask nothing of each other are queued in the
session and sent together as one statement, one round trip (``queue_write``); a block's
writes can go out as one statement that is a transaction of its own (``writes_alone``),
all or nothing (``LostRace``). On SQLite a queued write runs at once.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from signoff.storage.prepared.runner import QueryRunner
from signoff.storage.prepared.session_io import (
    NOTIFIES_LEFT_KEY,
    QUEUED_WRITES_KEY,
    QueuedWrite,
    QueuingSession,
    asyncpg_of,
    count_in,
    discard_queued_writes,
    mark_written,
    send_queued,
)
from signoff.storage.prepared.statements import PreparedQuery, all_or_nothing_sql


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
        queued.append(QueuedWrite(compiled, compiled.parameters(params), unless_one_row, marks))
        return
    changed = await count_in(session, query, params)
    if unless_one_row is not None and changed != 1:
        raise unless_one_row()
    mark_written(session, marks, changed)


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
        pg, _ = await asyncpg_of(session)
        await send_queued(session, pg)


# The measurement switch of ``writes_alone`` (docs/performance.md, *Hand-written
# replacements*): with it set, ``may_write_alone`` answers no, and a decision reads its
# request under a row lock and writes in an ordinary transaction.
STOCK_WRITES_ALONE_SWITCH = "SIGNOFF_STOCK_WRITES_ALONE"


def may_write_alone(session: AsyncSession, queries: QueryRunner | None) -> bool:
    """Whether ``writes_alone`` may serve ``session``: on PostgreSQL's autocommit
    connections (``queries``), before the session has begun anything."""
    return (
        queries is not None
        and queries.is_autocommit
        and not session.in_transaction()
        and os.environ.get(STOCK_WRITES_ALONE_SWITCH) != "1"
    )


# Where a session inside ``writes_alone`` keeps the runner its writes go out on.
WRITES_ALONE_KEY = "signoff.writes_alone"


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
    if session.in_transaction() or not queries.is_autocommit:
        raise RuntimeError("writes_alone needs a PostgreSQL session that has begun nothing")
    session.info[WRITES_ALONE_KEY] = queries
    session.info[NOTIFIES_LEFT_KEY] = True
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
    queued: list[QueuedWrite] = session.info.pop(QUEUED_WRITES_KEY, None) or []
    checked = tuple(write.unless_one_row is not None for write in queued)
    sql = all_or_nothing_sql(tuple(write.compiled for write in queued), checked)
    values = [value for write in queued for value in write.values]
    try:
        counts = await queries.run_sql(sql, values)
    except Exception as exc:
        if getattr(exc, "sqlstate", None) in _RACE_LOST_STATES:
            raise LostRace() from exc
        raise
    # Written: the statement answers each write's row count, in order.
    for write, count in zip(queued, counts, strict=True):
        mark_written(session, write.marks, count)


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
