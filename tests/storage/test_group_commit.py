"""Write transactions (``Database.write_transaction``), and on SQLite their group commit
(src/signoff/group_commit.py): writers queued behind one another share a transaction, each
in a savepoint of its own, and none returns before its writes are committed.

What users rely on: a write that returned is committed; a write that raised left nothing;
one writer's failure never undoes another's writes; nothing waits forever.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import threading
import uuid
from pathlib import Path

import pytest
from sqlalchemy import func, select

from signoff.approvals import service as approvals_service
from signoff.approvals.schemas import CreateApprovalRequest
from signoff.common.time import utcnow
from signoff.context import AppContext
from signoff.models import ApprovalRequest, Organization
from signoff.storage import sqlite_driver
from signoff.storage.database import Database
from signoff.storage.group_commit import GroupCommit
from signoff.storage.sqlite_driver import CHECKPOINT_EVERY_WRITES, Checkpointer, InlineConnection
from signoff.wiring import Wiring
from tests.conftest import Org, approval_body, eventually


class Refused(Exception):
    """A use case that fails after writing."""


async def _add_org(db: Database, name: str, *, fail: bool = False, pause: float = 0) -> None:
    async with db.write_transaction() as session:
        session.add(Organization(id=uuid.uuid4(), name=name, created_at=utcnow()))
        await session.flush()
        if pause:
            await asyncio.sleep(pause)
        if fail:
            raise Refused(name)


async def _names(ctx: AppContext) -> set[str]:
    async with ctx.reading() as uow:
        return set((await uow.session.scalars(select(Organization.name))).all())


# Group commit is SQLite's (PostgreSQL writers run side by side): these run on SQLite only.
sqlite_only = pytest.mark.parametrize("test_database", ["sqlite"], indirect=True)


def _group_commit(ctx: AppContext) -> GroupCommit:
    assert ctx.db.group_commit is not None
    return ctx.db.group_commit


async def test_a_returned_write_is_committed_and_a_raised_one_left_nothing(
    ctx: AppContext,
) -> None:
    await _add_org(ctx.db, "kept")
    with pytest.raises(Refused):
        await _add_org(ctx.db, "undone", fail=True)
    assert await _names(ctx) == {"kept"}


@sqlite_only
async def test_queued_writers_share_transactions_and_all_commit(ctx: AppContext) -> None:
    writers = _group_commit(ctx)
    names = [f"org-{i}" for i in range(40)]

    await asyncio.gather(*(_add_org(ctx.db, name) for name in names))

    assert await _names(ctx) == set(names)
    assert writers.committed_writers == 40
    # 40 writers at once: the first alone or with the rest, then at most 32 per batch.
    assert writers.committed_transactions <= 3


@sqlite_only
async def test_a_failing_writer_undoes_only_its_own_writes(ctx: AppContext) -> None:
    _group_commit(ctx)
    outcomes = await asyncio.gather(
        *(_add_org(ctx.db, f"org-{i}", fail=i % 5 == 2) for i in range(20)),
        return_exceptions=True,
    )

    failed = {f"org-{i}" for i in range(20) if i % 5 == 2}
    assert [str(o) for o in outcomes if isinstance(o, Exception)] == sorted(
        failed, key=lambda name: int(name.split("-")[1])
    )
    assert all(isinstance(o, Refused) for o in outcomes if o is not None)
    assert await _names(ctx) == {f"org-{i}" for i in range(20)} - failed


@sqlite_only
async def test_a_writer_returns_only_once_another_connection_sees_its_write(
    ctx: AppContext, database_url: str
) -> None:
    _group_commit(ctx)
    path = database_url.split("///", 1)[1]

    async def add_and_look(name: str) -> int:
        await _add_org(ctx.db, name)
        # A connection of its own, as another process would have.
        with sqlite3.connect(path) as other:
            row = other.execute("SELECT count(*) FROM organizations WHERE name = ?", (name,))
            return int(row.fetchone()[0])

    seen = await asyncio.gather(*(add_and_look(f"org-{i}") for i in range(10)))
    assert seen == [1] * 10


@sqlite_only
async def test_each_writer_starts_with_an_empty_session(ctx: AppContext) -> None:
    _group_commit(ctx)
    leftovers: list[tuple[int, bool]] = []
    kept: list[Organization] = []  # as endpoints keep the entities they answer with

    async def look_then_add(i: int) -> None:
        async with ctx.db.write_transaction() as session:
            leftovers.append((len(session.identity_map), "mark" in session.info))
            session.info["mark"] = i
            org = Organization(id=uuid.uuid4(), name=f"org-{i}", created_at=utcnow())
            session.add(org)
            await session.flush()
            kept.append(org)

    await asyncio.gather(*(look_then_add(i) for i in range(10)))
    assert leftovers == [(0, False)] * 10


@sqlite_only
async def test_a_failed_commit_fails_every_writer_of_the_transaction(
    ctx: AppContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    writers = _group_commit(ctx)
    real_commit = InlineConnection.commit
    failures = 0

    async def commit_failing_once(self: InlineConnection, writers: int = 1) -> None:
        nonlocal failures
        if failures == 0:
            failures += 1
            raise sqlite3.OperationalError("disk I/O error")
        await real_commit(self, writers)

    monkeypatch.setattr(InlineConnection, "commit", commit_failing_once)
    outcomes = await asyncio.gather(
        *(_add_org(ctx.db, f"org-{i}") for i in range(5)), return_exceptions=True
    )

    # The first writer's transaction failed; nobody of it was told it succeeded, and
    # nothing of it is in the database.
    failed = [i for i, o in enumerate(outcomes) if isinstance(o, sqlite3.OperationalError)]
    assert failed and failed[0] == 0
    assert await _names(ctx) == {f"org-{i}" for i in range(5) if i not in failed}
    assert writers.committed_writers == 5 - len(failed)

    # The writer's turn passed on: later writes go through.
    await _add_org(ctx.db, "after")
    assert "after" in await _names(ctx)


@sqlite_only
@pytest.mark.parametrize("cancel_after_turns", range(6))
async def test_a_cancelled_writer_never_leaves_others_waiting(
    ctx: AppContext, cancel_after_turns: int
) -> None:
    """Wherever a queued writer is cancelled (waiting for its turn, in its block, waiting
    for the commit), the writers before it still get their commit."""
    _group_commit(ctx)
    first = asyncio.create_task(_add_org(ctx.db, "first", pause=0.01))
    await asyncio.sleep(0)
    second = asyncio.create_task(_add_org(ctx.db, "second", pause=0.01))
    # These pauses pick where the cancellation lands, they wait for nothing: the writers
    # before it must get their commit wherever that is, so a slow machine only moves it.
    await asyncio.sleep(0.005)  # both queued, the first one in its block
    await asyncio.sleep(0.006)  # the first one has left its block, or is about to
    for _ in range(cancel_after_turns):
        await asyncio.sleep(0)
    second.cancel()

    await asyncio.wait_for(first, timeout=5)
    with pytest.raises(asyncio.CancelledError):
        await second
    names = await _names(ctx)
    assert "first" in names
    # And the process writes on afterwards.
    await asyncio.wait_for(_add_org(ctx.db, "third"), timeout=5)
    assert "third" in await _names(ctx)


@sqlite_only
async def test_a_checkpoint_waits_for_no_transaction_to_be_open(
    ctx: AppContext, database_url: str
) -> None:
    """``exclusive`` (the WAL checkpoint's turn) commits the open transaction first."""
    writers = _group_commit(ctx)
    tasks = [asyncio.create_task(_add_org(ctx.db, f"org-{i}", pause=0.001)) for i in range(5)]
    # Picks the moment, waits for nothing: whenever ``exclusive`` comes, it must find no
    # transaction open. Here, most often, the first writer is in its block, others queued.
    await asyncio.sleep(0.002)
    async with writers.exclusive():
        # No write transaction is open: another connection takes the write lock at once.
        other = sqlite3.connect(database_url.split("///", 1)[1], timeout=0)
        try:
            other.execute("BEGIN IMMEDIATE")
            other.execute("ROLLBACK")
        finally:
            other.close()
    await asyncio.gather(*tasks)
    assert await _names(ctx) == {f"org-{i}" for i in range(5)}


@sqlite_only
async def test_the_log_is_checkpointed_by_writes_not_by_transactions(
    ctx: AppContext, database_url: str
) -> None:
    """Shared transactions hold many writes each: checkpoints follow the writes, so the log
    is copied back and started over as often as when every write committed alone."""
    writers = _group_commit(ctx)
    checkpointer = ctx.db.checkpointer
    assert checkpointer is not None
    every = CHECKPOINT_EVERY_WRITES
    for round_ in range(6):
        await asyncio.gather(*(_add_org(ctx.db, f"org-{round_}-{i}") for i in range(every)))
        await checkpointer.close()  # waits for the checkpoint under way, if any
    assert writers.committed_writers == 6 * every
    assert writers.committed_transactions <= 6 * every // 12

    other = sqlite3.connect(database_url.split("///", 1)[1])
    try:
        _busy, log_frames, _copied = other.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    finally:
        other.close()
    # Counted by transactions, no checkpoint would have run: the log would hold all 6
    # rounds (some 6 x 3 x 160 frames). Counted by writes, it was copied back after each
    # round, and holds about one round's.
    assert 0 < log_frames < every


@sqlite_only
async def test_writers_go_on_while_a_checkpoint_runs(
    ctx: AppContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkpoint syncs the log and the database file: milliseconds on a good disk, far
    more on a slow one. Writers must not wait for it."""
    checkpointer = ctx.db.checkpointer
    assert checkpointer is not None
    under_way, go_on = threading.Event(), threading.Event()
    checkpoint = Checkpointer._checkpoint

    def held_checkpoint(self: Checkpointer) -> int:
        under_way.set()
        go_on.wait(10)
        return checkpoint(self)

    monkeypatch.setattr(Checkpointer, "_checkpoint", held_checkpoint)
    await asyncio.gather(*(_add_org(ctx.db, f"org-{i}") for i in range(CHECKPOINT_EVERY_WRITES)))
    assert await asyncio.to_thread(under_way.wait, 5)
    try:
        await asyncio.wait_for(_add_org(ctx.db, "during the checkpoint"), timeout=2)
    finally:
        go_on.set()
        await checkpointer.close()
    assert "during the checkpoint" in await _names(ctx)


@sqlite_only
async def test_the_log_starts_over_under_writes_that_never_stop(
    ctx: AppContext, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Writers going on during checkpoints keep adding to the log, so it is never all
    copied when the next writer begins: left to itself it would grow without end. Once a
    checkpoint leaves ``RESTART_LOG_FRAMES`` behind, writers pause for one more, and the
    log starts over. The log file keeps the size of its longest run, which shows it."""
    monkeypatch.setattr(sqlite_driver, "RESTART_LOG_FRAMES", 100)
    checkpointer = ctx.db.checkpointer
    assert checkpointer is not None
    stop = asyncio.Event()

    async def keep_writing(writer: int) -> None:
        for i in range(10_000):
            if stop.is_set():
                return
            await _add_org(ctx.db, f"org-{writer}-{i}")

    writers = [asyncio.create_task(keep_writing(w)) for w in range(8)]
    await asyncio.sleep(0)
    checkpoints = 0
    while checkpoints < 60:  # each ran while the writers went on
        if checkpointer._task is not None:
            await asyncio.shield(checkpointer._task)
            checkpoints += 1
        await asyncio.sleep(0)
    stop.set()
    await asyncio.gather(*writers)
    await checkpointer.close()

    # Some 3 frames a write here, 60 checkpoints of ``CHECKPOINT_EVERY_WRITES`` (160):
    # some 29,000 frames if the log never started over; if it did, what one checkpoint
    # leaves (under 100, or the writers pause) plus the writes of one interval and those
    # made during a checkpoint: the bound is the interval's, not the run's length.
    assert _log_file_frames(database_url) < 100 + 5 * CHECKPOINT_EVERY_WRITES


def _log_file_frames(database_url: str) -> int:
    """How many frames the WAL file has room for: a frame is a 24-byte header and a page."""
    log_bytes = Path(database_url.split("///", 1)[1] + "-wal").stat().st_size
    return (log_bytes - 32) // (24 + 4096)  # after the log's own 32-byte header


def _sqlite_temporary_files_open() -> list[str]:
    """Files this process holds open that SQLite made for temporary data: named
    ``etilqs_*`` and deleted as soon as they are opened, so only their descriptors show."""
    targets = []
    for descriptor in Path("/proc/self/fd").iterdir():
        try:
            target = os.readlink(descriptor)
        except OSError:  # closed since the listing
            continue
        if "etilqs_" in target:
            targets.append(target)
    return targets


@sqlite_only
@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs Linux's /proc/self/fd")
async def test_a_shared_transactions_statement_journal_stays_in_memory(
    ctx: AppContext, wiring: Wiring, org: Org
) -> None:
    """Every create in a shared transaction copies the pages it changes into a statement
    journal (so that it alone can be undone). Spilled to a file, that journal cost a third
    of a create's insert in write() calls; kept in memory, it costs a copy."""
    principal = await wiring.callers.authenticate(org.admin.api_key)
    assert principal is not None
    now = utcnow()
    async with ctx.transaction() as uow:
        for index in range(60):
            payload = CreateApprovalRequest.model_validate(approval_body(title=f"Deploy {index}"))
            await approvals_service.create_request(uow, principal, payload, ctx.box, now)
        # Still inside the transaction: a spilled journal would be open now.
        assert _sqlite_temporary_files_open() == []
    async with ctx.reading() as uow:
        created = select(func.count()).where(ApprovalRequest.org_id == principal.org_id)
        assert await uow.session.scalar(created) == 60


class _HeldCommits:
    """Holds the commits of this process's writer connection inside SQLite, as a slow
    disk does (a commit writes the log, and the first after the log starts over syncs
    it), until ``release``."""

    def __init__(self) -> None:
        self.under_way = threading.Event()
        self._released = threading.Event()

    async def install(self, db: Database) -> None:
        async with db.write_engine.connect() as connection:
            driver = (await connection.get_raw_connection()).driver_connection
            assert isinstance(driver, InlineConnection)
            driver._conn.set_trace_callback(self._traced)

    def _traced(self, statement: str) -> None:
        if statement == "COMMIT":
            self.under_way.set()
            self._released.wait(5)

    def release(self) -> None:
        self._released.set()


@sqlite_only
async def test_reads_go_on_while_a_commit_waits_for_the_disk(ctx: AppContext) -> None:
    """A commit on the event loop's thread stopped every request for as long as the disk
    took to write and sync the log (60 to 110 ms at a time on a throttled disk). Reads
    must be answered meanwhile."""
    await _add_org(ctx.db, "before")
    held = _HeldCommits()
    await held.install(ctx.db)
    writer = asyncio.create_task(_add_org(ctx.db, "held"))
    try:
        assert await asyncio.to_thread(held.under_way.wait, 5)
        names = await asyncio.wait_for(_names(ctx), timeout=2)
        assert names == {"before"}  # the held commit is not visible yet
        assert not writer.done()
    finally:
        held.release()
    await asyncio.wait_for(writer, timeout=5)
    assert await _names(ctx) == {"before", "held"}


@sqlite_only
async def test_a_writer_cancelled_while_its_commit_is_under_way(ctx: AppContext) -> None:
    """The commit goes on in its thread: the cancelled writer's write is committed (as the
    writers it shares the transaction with are told), writers queued behind it wait for
    that commit and then write, and the connection is never used by two at once."""
    held = _HeldCommits()
    await held.install(ctx.db)
    cancelled = asyncio.create_task(_add_org(ctx.db, "cancelled"))
    try:
        assert await asyncio.to_thread(held.under_way.wait, 5)
        queued = asyncio.create_task(_add_org(ctx.db, "queued"))
        writers = _group_commit(ctx)
        await eventually(lambda: writers._queued == 1, "the second writer to queue")
        cancelled.cancel()
        # A moment in which a wrongly released writer would go through (none must).
        await asyncio.sleep(0.01)
        assert not queued.done()
    finally:
        held.release()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(cancelled, timeout=5)
    await asyncio.wait_for(queued, timeout=5)
    await asyncio.wait_for(_add_org(ctx.db, "after"), timeout=5)
    assert await _names(ctx) == {"cancelled", "queued", "after"}
