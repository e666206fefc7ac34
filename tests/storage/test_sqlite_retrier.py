"""Waiting out another process's write lock (``sqlite_driver.Retrier``).

What users rely on: a CLI command or a ``signoff worker`` that holds SQLite's write lock
for a moment delays this process's write, never fails it before the busy timeout, and
never stops the event loop from answering others meanwhile; past the timeout the write
fails rather than waiting forever. Both ways of running a call (on the loop's thread, and
in a worker thread, as the writer's commits are) behave the same.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest

from signoff.storage.sqlite_driver import Retrier, open_sqlite

Runner = Callable[[Retrier, Callable[[], sqlite3.Cursor]], Awaitable[sqlite3.Cursor]]
RUNNERS: dict[str, Runner] = {
    "on the loop": lambda retrier, call: retrier.run(call),
    "in a thread": lambda retrier, call: retrier.run_in_thread(call),
}


@pytest.fixture
def database(tmp_path: Path) -> Iterator[str]:
    path = str(tmp_path / "locked.db")
    with sqlite3.connect(path) as setup:
        setup.execute("PRAGMA journal_mode=WAL")
        setup.execute("CREATE TABLE t (x)")
    yield path


def _hold_the_write_lock(path: str) -> sqlite3.Connection:
    """Another process's writer, as far as our connection can tell."""
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")
    return other


async def _ticks_during(work: Awaitable[object]) -> tuple[object, int]:
    """``work``'s outcome, and how many 5 ms ticks the event loop made meanwhile."""
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.005)
            ticks += 1

    ticker = asyncio.create_task(tick())
    try:
        return await work, ticks
    finally:
        ticker.cancel()


@pytest.mark.parametrize("runner", RUNNERS)
async def test_a_write_waits_for_the_lock_while_the_loop_serves_others(
    database: str, runner: str
) -> None:
    ours = open_sqlite(f"sqlite:///{database}")
    other = _hold_the_write_lock(database)
    # The other writer holds the lock for 0.2 s: that wait is what is under test.
    asyncio.get_running_loop().call_later(0.2, other.rollback)
    try:
        _, ticks = await _ticks_during(
            RUNNERS[runner](Retrier(busy_timeout=5.0), lambda: ours.execute("BEGIN IMMEDIATE"))
        )
        ours.execute("INSERT INTO t VALUES (1)")
        ours.commit()
    finally:
        ours.close()
        other.close()
    # 0.2 s of waiting: the loop went on ticking (a blocking wait would leave it at 0).
    assert ticks >= 10
    with sqlite3.connect(database) as check:
        assert check.execute("SELECT count(*) FROM t").fetchone() == (1,)


@pytest.mark.parametrize("runner", RUNNERS)
async def test_a_write_fails_once_the_busy_timeout_has_passed(database: str, runner: str) -> None:
    ours = open_sqlite(f"sqlite:///{database}")
    other = _hold_the_write_lock(database)
    loop = asyncio.get_running_loop()
    started = loop.time()
    try:
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            await asyncio.wait_for(
                RUNNERS[runner](Retrier(busy_timeout=0.2), lambda: ours.execute("BEGIN IMMEDIATE")),
                timeout=5,
            )
    finally:
        ours.close()
        other.close()
    assert 0.2 <= loop.time() - started < 2
