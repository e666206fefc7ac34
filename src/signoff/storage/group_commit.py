"""Group commit: the SQLite writers of one process share transactions.

Why: SQLite writes one transaction at a time, and a commit costs far more than the
statements before it. A create touches some twenty-five pages (the row, ten indexes, the
search index, the audit event), and each commit appends every page it changed to the
write-ahead log, whole, so a commit of its own for every write is what a create paid
most for (docs/decisions/0002-group-commit-on-sqlite.md).
Writers of this process are serialized anyway (``db.Database``), so those queued behind
one another join one transaction, and pages they share (index leaves, the search index's
new segment) are written once for all of them.

How: each writer, in its turn, runs its block inside a savepoint of its own. When no
writer is queued behind it (or ``max_writers`` have joined), the transaction commits.
Every writer then waits for that commit before its block returns, so nobody answers
before their writes are committed. Under no load, a writer finds nobody behind it and
commits at once, as before.

- A writer whose block raises rolls back to its savepoint, so its writes are gone and the
  others' stay. The batch then commits without waiting for more writers: after a failed
  flush, SQLAlchemy refuses to go on with that session.
- If the commit itself fails, every writer of the batch gets the error.
- Each writer starts with an empty session: no entity, no ``session.info`` of an earlier
  writer leaks into its block.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from sqlalchemy.ext.asyncio import AsyncSession

from signoff.storage import channel_presence
from signoff.storage.prepared import (
    SQLITE_CONNECTION_KEY,
    STOCK_EXECUTION_KEY,
    SQLiteTransaction,
    has_unflushed_changes,
    inline_driver,
)

logger = logging.getLogger(__name__)

# Writers of one transaction at most: the first of them waits for all the others' blocks
# before its commit, so this bounds how long a batch keeps its first writer waiting.
MAX_WRITERS = 32
# The measurement switch (docs/performance.md, *Hand-written replacements*): with it set
# when the database is opened, every writer commits a transaction of its own.
STOCK_SWITCH = "SIGNOFF_STOCK_COMMITS"


def writers_per_transaction() -> int:
    """How many writers' blocks one transaction may hold: one with the switch set."""
    return 1 if os.environ.get(STOCK_SWITCH) == "1" else MAX_WRITERS


_SAVEPOINT = "signoff_writer"


@dataclass
class _Batch:
    session: AsyncSession
    sqlite: SQLiteTransaction
    committed: asyncio.Future[None] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    writers: int = 0


class GroupCommit:
    """Hands out write sessions whose transactions are shared: see the module's docstring."""

    def __init__(
        self, new_session: Callable[[], AsyncSession], *, max_writers: int | None = None
    ) -> None:
        self._new_session = new_session
        self._max_writers = writers_per_transaction() if max_writers is None else max_writers
        self._turn = asyncio.Lock()  # FIFO: writers take their turns in arrival order
        self._queued = 0
        self._batch: _Batch | None = None
        # The task committing a batch its writers left open (_take_turn), kept here so it
        # is not garbage-collected while it runs.
        self._closing: asyncio.Future[None] | None = None
        # What was committed so far: transactions, and the writers' blocks they held.
        self.committed_transactions = 0
        self.committed_writers = 0
        # The writer connection and its ``PRAGMA data_version`` when the last transaction
        # began: a change says another connection committed since (``channel_presence``).
        self._seen: tuple[sqlite3.Connection, int] | None = None

    @asynccontextmanager
    async def writer(self) -> AsyncIterator[AsyncSession]:
        """A session whose writes commit when the block ends without an exception, and
        are rolled back when it raises."""
        await self._take_turn()
        try:
            batch = self._batch or await self._open()
            await self._begin_block(batch)
            failed = True
            try:
                yield batch.session
                if has_unflushed_changes(batch.session):
                    await batch.session.flush()
                failed = False
            finally:
                await self._end_block(batch, failed=failed)
            batch.writers += 1
            try:
                if batch.writers < self._max_writers:
                    # A block runs without yielding (SQLite calls complete inline), so
                    # nobody could queue meanwhile: one turn of the event loop lets every
                    # request that is ready run up to its own write and queue behind it.
                    await asyncio.sleep(0)
            finally:
                # Even when cancelled during that turn: nobody else may be left to commit.
                if self._batch is batch and (
                    self._queued == 0 or batch.writers >= self._max_writers
                ):
                    await self._commit(batch)
        finally:
            self._turn.release()
        # Shielded: a writer cancelled now has its writes committed all the same; the
        # others must not lose the commit's outcome with it.
        await asyncio.shield(batch.committed)

    async def _take_turn(self) -> None:
        self._queued += 1
        try:
            await self._turn.acquire()
        except BaseException:
            self._queued -= 1
            if self._queued == 0 and self._batch is not None:
                # The writer that left this batch open counted on this one to go on with
                # it: somebody else must commit it now.
                self._closing = asyncio.ensure_future(self._close_open_batch())
            raise
        self._queued -= 1

    async def _close_open_batch(self) -> None:
        async with self.exclusive():
            pass

    @asynccontextmanager
    async def exclusive(self) -> AsyncIterator[None]:
        """No write transaction open during the block: a checkpoint runs here, so that the
        next writer can start the log over."""
        async with self._turn:
            if self._batch is not None:
                await self._commit(self._batch)
            yield

    async def _open(self) -> _Batch:
        session = self._new_session()
        try:
            # Taking the connection begins the transaction (BEGIN IMMEDIATE, db.py).
            connection = await session.connection()
            sqlite = SQLiteTransaction(await inline_driver(connection), connection.dialect)
        except BaseException:
            await session.close()
            raise
        self._batch = _Batch(session, sqlite)
        try:
            seen = await sqlite.driver.run(_data_version)
        except BaseException as error:
            await self._abandon(self._batch, error)
            raise
        if self._seen is None or seen[0] is not self._seen[0] or seen[1] != self._seen[1]:
            channel_presence.moved()
        self._seen = seen
        return self._batch

    async def _begin_block(self, batch: _Batch) -> None:
        # Prepared statements (``prepared/``) find the connection here, not through SQLAlchemy.
        batch.session.info[SQLITE_CONNECTION_KEY] = batch.sqlite
        try:
            await _execute(batch, f"SAVEPOINT {_SAVEPOINT}")
        except BaseException as error:
            await self._abandon(batch, error)
            raise

    async def _end_block(self, batch: _Batch, *, failed: bool) -> None:
        """Keep or undo one writer's block, and leave the session empty for the next."""
        try:
            if failed:
                await _execute(batch, f"ROLLBACK TO {_SAVEPOINT}")
            await _execute(batch, f"RELEASE {_SAVEPOINT}")
        except BaseException as error:
            await self._abandon(batch, error)
            raise
        if failed or len(batch.session.identity_map):
            batch.session.expunge_all()
        info = batch.session.info
        stock = info.get(STOCK_EXECUTION_KEY)
        info.clear()
        if stock:  # the database's, not the block's (session_io.stock_execution_info)
            info[STOCK_EXECUTION_KEY] = stock
        if failed:
            await self._commit(batch)

    async def _commit(self, batch: _Batch) -> None:
        """Commit the batch (straight on the driver: SQLAlchemy would refuse after a failed
        flush, which the savepoint has undone) and tell its writers."""
        self._batch = None
        try:
            await batch.sqlite.driver.commit(batch.writers)
        except BaseException as error:
            await self._abandon(batch, error)
            return
        channel_presence.transaction_ended()
        self.committed_transactions += 1
        self.committed_writers += batch.writers
        await batch.session.close()  # its rollback on return finds no transaction
        batch.committed.set_result(None)

    async def _abandon(self, batch: _Batch, error: BaseException) -> None:
        """The transaction cannot go on: roll it back and fail every writer of it."""
        self._batch = None
        channel_presence.transaction_ended()
        logger.warning("a shared write transaction failed and was rolled back: %r", error)
        try:
            await batch.session.close()  # rolls the connection back
        finally:
            if not batch.committed.done():
                batch.committed.set_exception(error)
                if batch.writers == 0:
                    batch.committed.exception()  # nobody waits for it: the error is seen


def _data_version(connection: sqlite3.Connection) -> tuple[sqlite3.Connection, int]:
    return connection, int(connection.execute("PRAGMA data_version").fetchone()[0])


async def _execute(batch: _Batch, sql: str) -> None:
    await batch.sqlite.driver.run(lambda sqlite: sqlite.execute(sql))
