"""SQLite connections for the async engine that run their calls on the event loop's thread.

Why: aiosqlite gives every connection a thread of its own and hands each call over to it
and back: opening a cursor, executing, fetching, closing the cursor, committing are each
a round trip through two queues and two thread wake-ups. Reading one request took 18 of
them, and on a small (virtual) machine those wake-ups cost far more than the statements,
which SQLite answers from its page cache in microseconds
(docs/decisions/0003-inline-sqlite-driver.md).

These connections offer SQLAlchemy's aiosqlite dialect the interface of an aiosqlite
connection, through the dialect's documented ``async_creator`` hook, and run every call
at once on the calling thread. The dialect, the SQL and the transactions are unchanged.

What would otherwise block the event loop:

- Waiting for a lock that another process holds (a CLI command, ``signoff worker``):
  SQLite's busy handler sleeps inside the call. These connections have none
  (``busy_timeout`` 0); a statement refused with SQLITE_BUSY is retried after an asyncio
  sleep until the same deadline the busy timeout would have given, so the loop keeps
  serving meanwhile. Writers of this process never get there: they queue for their
  turn (``group_commit``) first.
- Slow statements: they hold the loop for their duration. Every query on the request path
  is indexed (DESIGN.md), so that is microseconds to a few milliseconds.
- WAL checkpoints: SQLite copies the log back into the database (and syncs the file) inside
  the commit that crosses ``wal_autocheckpoint``, milliseconds at a time. Writer
  connections made here turn that off and leave it to a ``Checkpointer``, which runs the
  checkpoint in a worker thread every ``CHECKPOINT_EVERY_WRITES`` writes.
- Writing the log: a commit writes its pages into the log, and the first one after the log
  starts over syncs its header. The writer connection's commits run in a worker thread
  (``InlineConnection.commit``), and so do the statements a connection runs just before
  it commits a transaction that wrote (``before_commit``: the search index's catch-up,
  ``approvals.search_index``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
from collections.abc import Awaitable, Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractAsyncContextManager
from typing import Any, TypeVar

from sqlalchemy.engine import Connection
from sqlalchemy.util import await_only

from signoff.storage.aiosqlite_lookalike import AiosqliteLookalike, sqlite_connect_args

T = TypeVar("T")
logger = logging.getLogger(__name__)
_open_sqlite: Callable[..., sqlite3.Connection] = sqlite3.connect

# SQLITE_BUSY and SQLITE_BUSY_RECOVERY are worth waiting out; SQLITE_BUSY_SNAPSHOT (517)
# is not: that transaction's snapshot can never be upgraded, retrying would only repeat it.
_RETRIED_ERROR_CODES = frozenset({5, 261})
_FIRST_PAUSE = 0.001
_LONGEST_PAUSE = 0.05
# Counted in writers' blocks, not commits: a create committed alone adds some 22 pages to
# the log, one in a shared transaction (group_commit) some 3. A checkpoint copies the log
# back while writers go on, but costs a create load some 4 % of the server's CPU when run
# every 40 writes (docs/decisions/0034-create-cuts.md): every 160, the log holds some 500
# frames (2 MB) between two under load, at most some 3,500 (14 MB) of creates committed
# alone, and ``RESTART_LOG_FRAMES`` still starts it over.
CHECKPOINT_EVERY_WRITES = 160
# The log is started over once a checkpoint leaves it this long (SQLite's own checkpoint
# size): writers then pause for a last checkpoint of what they added meanwhile.
RESTART_LOG_FRAMES = 1_000
# The measurement switch (docs/performance.md, *Hand-written replacements*): with it set
# when a connection opens, each of its calls is handed to a thread of the connection's own
# and back, as aiosqlite does (``ThreadedConnection``).
STOCK_SWITCH = "SIGNOFF_STOCK_SQLITE_DRIVER"


def threaded() -> bool:
    """Whether the measurement switch asks for aiosqlite's threads."""
    return os.environ.get(STOCK_SWITCH) == "1"


def _is_busy(error: sqlite3.OperationalError) -> bool:
    return getattr(error, "sqlite_errorcode", None) in _RETRIED_ERROR_CODES


class Retrier:
    """Runs a call, waiting out SQLITE_BUSY with asyncio sleeps up to a deadline."""

    def __init__(self, busy_timeout: float) -> None:
        self.busy_timeout = busy_timeout

    async def run(self, call: Callable[[], T]) -> T:
        # At once first, without a coroutine around it: every statement comes here, and
        # nearly all of them succeed on the first attempt.
        try:
            return call()
        except sqlite3.OperationalError as error:
            if not _is_busy(error):
                raise
        return await self._until_not_busy(lambda: _at_once(call), refused_once=True)

    async def run_on(self, thread: ThreadPoolExecutor, call: Callable[[], T]) -> T:
        """``run``, each attempt handed to ``thread`` and back (``ThreadedConnection``)."""
        loop = asyncio.get_running_loop()
        return await self._until_not_busy(
            lambda: loop.run_in_executor(thread, call), refused_once=False
        )

    async def run_in_thread(self, call: Callable[[], T]) -> T:
        """``run``, each attempt in a worker thread (``_off_the_loop``)."""
        return await self._until_not_busy(lambda: _off_the_loop(call), refused_once=False)

    async def _until_not_busy(
        self, attempt: Callable[[], Awaitable[T]], *, refused_once: bool
    ) -> T:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.busy_timeout
        pause = _FIRST_PAUSE
        while True:
            if refused_once:
                await asyncio.sleep(pause)
                pause = min(pause * 2, _LONGEST_PAUSE)
            refused_once = True
            try:
                return await attempt()
            except sqlite3.OperationalError as error:
                if not _is_busy(error) or loop.time() >= deadline:
                    raise


async def _at_once(call: Callable[[], T]) -> T:
    return call()


async def _off_the_loop(call: Callable[[], T]) -> T:
    """``call`` in a worker thread, awaited to its end even if the caller is cancelled
    meanwhile: until it returns, its connection is in use, and whether a commit happened
    is not known. The cancellation is then delivered at the caller's next wait."""
    future = asyncio.get_running_loop().run_in_executor(None, call)
    cancelled = False
    try:
        while True:
            try:
                return await asyncio.shield(future)
            except asyncio.CancelledError:
                if future.cancelled():
                    raise
                cancelled = True
                if future.done():
                    return future.result()
    finally:
        if cancelled and (task := asyncio.current_task()) is not None:
            task.cancel()


class Checkpointer:
    """Checkpoints the WAL of one database file in a worker thread, every so many writes.

    Writers go on during a checkpoint: it copies the log as far as it was when it began,
    and syncs the log and the database file, which writers used to wait out every
    ``CHECKPOINT_EVERY_WRITES`` writes (under load a large share of their time, and a slow
    disk's sync stalled every write: docs/decisions/0003-inline-sqlite-driver.md). The log
    starts over only when a writer begins while all of it has been copied,
    which under steady writes never happens by itself: so once a checkpoint leaves
    ``RESTART_LOG_FRAMES`` or more in the log, this process's writers are kept out
    (``writers_paused``) for one more checkpoint, of the little they added meanwhile, and
    the next writer starts the log over. Reads go on throughout.
    """

    def __init__(
        self, url: str, writers_paused: Callable[[], AbstractAsyncContextManager[None]]
    ) -> None:
        args, kwargs = sqlite_connect_args(url)
        self._args = args
        self._kwargs = {**kwargs, "check_same_thread": False}
        self._writers_paused = writers_paused
        self._writes = 0
        self._task: asyncio.Task[None] | None = None
        self._connection: sqlite3.Connection | None = None

    def committed(self, writers: int = 1) -> None:
        self._writes += writers
        if self._writes >= CHECKPOINT_EVERY_WRITES and self._task is None:
            self._writes = 0
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        try:
            log_frames = await asyncio.to_thread(self._checkpoint)
            if log_frames >= RESTART_LOG_FRAMES:
                async with self._writers_paused():
                    await asyncio.to_thread(self._checkpoint)
        except Exception as error:
            logger.warning("WAL checkpoint failed (the next one retries): %s", error)
        finally:
            self._task = None

    def _checkpoint(self) -> int:
        """One passive checkpoint; how many frames the log holds (copied or not)."""
        # One connection kept for every checkpoint (they never overlap: ``_task``). Why:
        # opening one costs far more than a checkpoint of a short log.
        if self._connection is None:
            self._connection = _open_sqlite(*self._args, **self._kwargs)
            self._connection.execute("PRAGMA busy_timeout=1000")
        try:
            _busy, log_frames, _copied = self._connection.execute(
                "PRAGMA wal_checkpoint(PASSIVE)"
            ).fetchone()
            return int(log_frames)
        except BaseException:
            self._close_connection()  # the next checkpoint starts on a fresh one
            raise

    def _close_connection(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    async def close(self) -> None:
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)
        self._close_connection()


class InlineCursor:
    """An aiosqlite-shaped cursor whose coroutines complete without leaving the thread."""

    __slots__ = ("_cursor", "_retrier")

    def __init__(self, cursor: sqlite3.Cursor, retrier: Retrier) -> None:
        self._cursor = cursor
        self._retrier = retrier

    async def __aenter__(self) -> InlineCursor:
        return self

    async def __aexit__(self, *_: object) -> None:
        self._cursor.close()

    async def execute(self, sql: str, parameters: Any = ()) -> InlineCursor:
        await self._retrier.run(lambda: self._cursor.execute(sql, parameters))
        return self

    async def executemany(self, sql: str, parameters: Iterable[Any]) -> InlineCursor:
        rows = list(parameters)  # a retry must see every row again
        await self._retrier.run(lambda: self._cursor.executemany(sql, rows))
        return self

    async def fetchone(self) -> Any:
        return self._cursor.fetchone()

    async def fetchmany(self, size: int | None = None) -> list[Any]:
        return self._cursor.fetchmany(self._cursor.arraysize if size is None else size)

    async def fetchall(self) -> list[Any]:
        return self._cursor.fetchall()

    async def close(self) -> None:
        self._cursor.close()

    @property
    def description(self) -> Any:
        return self._cursor.description

    @property
    def rowcount(self) -> int:
        return self._cursor.rowcount

    @property
    def lastrowid(self) -> int | None:
        return self._cursor.lastrowid

    @property
    def arraysize(self) -> int:
        return self._cursor.arraysize

    @arraysize.setter
    def arraysize(self, value: int) -> None:
        self._cursor.arraysize = value


class InlineConnection(AiosqliteLookalike):
    """An aiosqlite-shaped connection over a ``sqlite3`` connection, used on one thread."""

    def __init__(
        self,
        connection: sqlite3.Connection,
        busy_timeout: float,
        checkpointer: Checkpointer | None = None,
        before_commit: Sequence[str] = (),
    ) -> None:
        super().__init__(connection)  # what SQLAlchemy's adapter reads (aiosqlite_lookalike)
        self._retrier = Retrier(busy_timeout)
        self._checkpointer = checkpointer
        self._before_commit = before_commit
        # SQLite's count of rows this connection changed, as it was when its last
        # transaction ended: a transaction that leaves it as it was wrote nothing.
        self._changes_at_end = connection.total_changes

    def cursor(self) -> InlineCursor:
        return InlineCursor(self._conn.cursor(), self._retrier)

    async def run(self, call: Callable[[sqlite3.Connection], T]) -> T:
        """``call`` with the ``sqlite3`` connection itself (``prepared/``), busy waits included."""
        return await self._retrier.run(lambda: call(self._conn))

    async def begin(self, statement: str) -> None:
        await self._retrier.run(lambda: self._conn.execute(statement))

    async def commit(self, writers: int = 1) -> None:
        """Commit; ``writers``: how many writers' blocks the transaction held
        (``group_commit``), which is what the log grows by.

        The writer connection (the one with a ``checkpointer``) commits in a worker thread:
        its commit writes the transaction's pages into the log, and the first commit after
        the log starts over also syncs the log's header, for as long as the disk takes.
        On the event loop's thread that stopped every request meanwhile, for as long as a
        throttled disk took (docs/decisions/0003-inline-sqlite-driver.md). Writers wait for
        it either way: the next transaction begins after this one's commit
        (``group_commit``)."""
        if self._checkpointer is None:
            await self._retrier.run(self._commit)
            return
        await self._retrier.run_in_thread(self._commit)
        self._checkpointer.committed(writers)

    def _commit(self) -> None:
        """``before_commit``'s statements, if the transaction wrote, then the commit.

        Run again in full if the commit is refused as busy: the statements find nothing
        left to do the second time (``approvals.search_index``)."""
        if self._before_commit and self._wrote():
            for statement in self._before_commit:
                self._conn.execute(statement)
        self._conn.commit()
        self._changes_at_end = self._conn.total_changes

    def _wrote(self) -> bool:
        return self._conn.in_transaction and self._conn.total_changes != self._changes_at_end

    async def rollback(self) -> None:
        self._conn.rollback()
        self._changes_at_end = self._conn.total_changes

    async def close(self) -> None:
        self._conn.close()

    def stop(self) -> None:
        """aiosqlite's forced close, used when SQLAlchemy terminates a connection."""
        self._conn.close()

    async def create_function(self, *args: Any, **kwargs: Any) -> None:
        self._conn.create_function(*args, **kwargs)

    @property
    def isolation_level(self) -> str | None:
        return self._conn.isolation_level


class ThreadedCursor(InlineCursor):
    """``InlineCursor`` whose calls run on its connection's thread (``ThreadedConnection``)."""

    __slots__ = ("_thread",)

    def __init__(self, cursor: sqlite3.Cursor, retrier: Retrier, thread: ThreadPoolExecutor):
        super().__init__(cursor, retrier)
        self._thread = thread

    async def _hop(self, call: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._thread, call)

    async def __aexit__(self, *_: object) -> None:
        await self._hop(self._cursor.close)

    async def execute(self, sql: str, parameters: Any = ()) -> InlineCursor:
        await self._retrier.run_on(self._thread, lambda: self._cursor.execute(sql, parameters))
        return self

    async def executemany(self, sql: str, parameters: Iterable[Any]) -> InlineCursor:
        rows = list(parameters)
        await self._retrier.run_on(self._thread, lambda: self._cursor.executemany(sql, rows))
        return self

    async def fetchone(self) -> Any:
        return await self._hop(self._cursor.fetchone)

    async def fetchmany(self, size: int | None = None) -> list[Any]:
        wanted = self._cursor.arraysize if size is None else size
        return await self._hop(lambda: self._cursor.fetchmany(wanted))

    async def fetchall(self) -> list[Any]:
        return await self._hop(self._cursor.fetchall)

    async def close(self) -> None:
        await self._hop(self._cursor.close)


class ThreadedConnection(InlineConnection):
    """For the measurement switch only (``STOCK_SWITCH``): an ``InlineConnection`` whose
    every call is handed to a thread of its own and back, as aiosqlite does; the
    statements, transactions and checkpoints are unchanged."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sqlite")

    def cursor(self) -> InlineCursor:
        return ThreadedCursor(self._conn.cursor(), self._retrier, self._thread)

    async def run(self, call: Callable[[sqlite3.Connection], T]) -> T:
        return await self._retrier.run_on(self._thread, lambda: call(self._conn))

    async def begin(self, statement: str) -> None:
        await self._retrier.run_on(self._thread, lambda: self._conn.execute(statement))

    async def commit(self, writers: int = 1) -> None:
        await self._retrier.run_on(self._thread, self._commit)
        if self._checkpointer is not None:
            self._checkpointer.committed(writers)

    async def rollback(self) -> None:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._thread, self._conn.rollback)
        self._changes_at_end = self._conn.total_changes

    async def close(self) -> None:
        await asyncio.get_running_loop().run_in_executor(self._thread, self._conn.close)
        self._thread.shutdown(wait=False)


def begin_transaction(connection: Connection, statement: str) -> None:
    """Start the transaction of ``connection`` (an engine's ``begin`` event) with
    ``statement``, sent straight to SQLite rather than through a SQLAlchemy execution."""
    driver = connection.connection.driver_connection
    if not isinstance(driver, InlineConnection):
        raise TypeError(f"expected an inline SQLite connection, got {type(driver).__name__}")
    await_only(driver.begin(statement))


def open_sqlite(url: str) -> sqlite3.Connection:
    """A connection to the SQLite ``url`` for use on the event loop's thread."""
    args, kwargs = sqlite_connect_args(url)
    connection = _open_sqlite(*args, **{**kwargs, "check_same_thread": False})
    # No busy handler: it would sleep on the event loop's thread (see above).
    connection.execute("PRAGMA busy_timeout=0")
    # Statement journals in memory. Inside a transaction, every statement that may abort
    # (ours: triggers, foreign keys, unique keys) copies each page it is about to change
    # into a statement journal, and a transaction's journal soon outgrows the 64 KiB that
    # SQLite keeps in memory before spilling it to a file in /var/tmp: a create then made
    # many more write() calls there than to the WAL
    # (docs/decisions/0003-inline-sqlite-driver.md). Sorts' temporary b-trees stay in
    # memory too.
    connection.execute("PRAGMA temp_store=MEMORY")
    return connection


def inline_connector(
    url: str,
    busy_timeout: float,
    checkpointer: Checkpointer | None = None,
    before_commit: Sequence[str] = (),
) -> Callable[[], Awaitable[InlineConnection]]:
    """The ``async_creator`` for an async engine on the SQLite ``url``.

    With a ``checkpointer`` (the engine that commits this process's writes), the WAL
    checkpoints are left to it (see above). ``before_commit``: statements each connection
    runs just before it commits a transaction that wrote.
    """

    async def connect() -> InlineConnection:
        connection = open_sqlite(url)
        if checkpointer is not None:
            connection.execute("PRAGMA wal_autocheckpoint=0")
        kind = ThreadedConnection if threaded() else InlineConnection
        return kind(connection, busy_timeout, checkpointer, before_commit)

    return connect
