"""SQLite's search index, written once per transaction as it commits
(src/signoff/approvals/search_index.py, migration 0007).

What users rely on: a request is found by search as soon as its create has returned, a
create that failed is never found, and nothing queued for the index is ever left behind.
What keeps the server responsive: the index's writing runs in the commit's worker thread,
not on the event loop's thread.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import threading
import uuid
from pathlib import Path

import pytest

from signoff.approvals import service as approvals_service
from signoff.approvals.schemas import CreateApprovalRequest
from signoff.approvals.search_index import SQLITE_CATCH_UP
from signoff.common.time import utcnow
from signoff.context import AppContext
from signoff.storage.sqlite_driver import InlineConnection
from signoff.wiring import Wiring
from tests.conftest import Org, approval_body

pytestmark = pytest.mark.parametrize("test_database", ["sqlite"], indirect=True)


class Refused(Exception):
    """A use case that fails after its create was written."""


async def _create(wiring: Wiring, org: Org, title: str, *, fail: bool = False) -> str:
    principal = await wiring.callers.authenticate(org.admin.api_key)
    assert principal is not None
    payload = CreateApprovalRequest.model_validate(approval_body(title=title))
    async with wiring.ctx.transaction() as uow:
        result = await approvals_service.create_request(
            uow, principal, payload, wiring.ctx.box, utcnow()
        )
        if fail:
            raise Refused(title)
    return result.request.id.hex


def _path(database_url: str) -> str:
    return database_url.split(":///", 1)[1]


def _found(path: str, word: str) -> set[str]:
    """The requests the search index finds for ``word`` in their titles."""
    with sqlite3.connect(path) as db:
        rows = db.execute(
            "SELECT request_id FROM approval_requests_fts WHERE approval_requests_fts MATCH ?",
            (f"title : {word}",),
        )
        return {row[0] for row in rows}


def _queued(path: str) -> int:
    with sqlite3.connect(path) as db:
        return int(db.execute("SELECT count(*) FROM approval_requests_fts_pending").fetchone()[0])


async def test_creates_sharing_a_transaction_are_found_and_failed_ones_are_not(
    ctx: AppContext, wiring: Wiring, org: Org, database_url: str
) -> None:
    """Writers queued together share one transaction, each in a savepoint; the ones that
    fail are rolled back to theirs and must leave nothing in the index or its queue."""
    outcomes = await asyncio.gather(
        *(_create(wiring, org, f"Rotate key{i}", fail=i % 4 == 1) for i in range(16)),
        return_exceptions=True,
    )

    created = {o for o in outcomes if isinstance(o, str)}
    assert len(created) == 12
    assert all(isinstance(o, Refused) for o in outcomes if not isinstance(o, str))
    assert ctx.db.group_commit is not None
    assert ctx.db.group_commit.committed_transactions < 16  # they did share
    path = _path(database_url)
    assert _found(path, "rotate") == created
    assert _queued(path) == 0


async def test_the_index_is_written_by_the_commit_in_its_worker_thread(
    ctx: AppContext, wiring: Wiring, org: Org
) -> None:
    """FTS5's work (tokenizing, writing a segment, merging segments) once held the event
    loop for 30 to 54 ms at a time; it belongs to the commit, off the loop's thread."""
    writes: list[int] = []

    def traced(statement: str) -> None:
        if statement.startswith("INSERT INTO approval_requests_fts "):
            writes.append(threading.get_ident())

    async with ctx.db.write_engine.connect() as connection:
        driver = (await connection.get_raw_connection()).driver_connection
        assert isinstance(driver, InlineConnection)
        driver._conn.set_trace_callback(traced)

    await _create(wiring, org, "Rotate keys")
    await asyncio.gather(*(_create(wiring, org, f"Rotate key{i}") for i in range(5)))

    assert writes, "the index was not written by a statement of its own"
    assert threading.get_ident() not in writes


async def test_requests_written_by_another_program_are_indexed_by_the_next_write(
    ctx: AppContext, wiring: Wiring, org: Org, database_url: str
) -> None:
    """A program that writes the file directly does not catch the index up: the next
    transaction of signoff that writes anything does."""
    path = _path(database_url)
    mine = await _create(wiring, org, "Rotate keys")
    theirs = uuid.uuid4().hex
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA foreign_keys=ON")
        db.execute(
            "INSERT INTO approval_requests (id, org_id, connection_id, title, description, "
            "status, priority, metadata, required_approvals, current_approvals, "
            "is_sequential, created_at, updated_at, comments_count, has_steps, number) "
            "SELECT ?, org_id, connection_id, 'Rotate theirs', description, status, priority, "
            "metadata, required_approvals, current_approvals, is_sequential, created_at, "
            "updated_at, 0, 0, number + 1000 FROM approval_requests WHERE id = ?",
            (theirs, mine),
        )
    assert _found(path, "rotate") == {mine}
    assert _queued(path) == 1

    later = await _create(wiring, org, "Unrelated change")

    assert _found(path, "rotate") == {mine, theirs}
    assert _found(path, "unrelated") == {later}
    assert _queued(path) == 0


async def test_a_request_deleted_before_its_transaction_commits_leaves_nothing_queued(
    ctx: AppContext, wiring: Wiring, org: Org, database_url: str
) -> None:
    """Its rowid would otherwise stay queued, and could name the next request inserted."""
    path = _path(database_url)
    mine = await _create(wiring, org, "Rotate keys")
    with sqlite3.connect(path) as db:
        db.execute(
            "INSERT INTO approval_requests (id, org_id, connection_id, title, description, "
            "status, priority, metadata, required_approvals, current_approvals, "
            "is_sequential, created_at, updated_at, comments_count, has_steps, number) "
            "SELECT ?, org_id, connection_id, 'Short lived', description, status, priority, "
            "metadata, required_approvals, current_approvals, is_sequential, created_at, "
            "updated_at, 0, 0, number + 1000 FROM approval_requests WHERE id = ?",
            (uuid.uuid4().hex, mine),
        )
        db.execute("DELETE FROM approval_requests WHERE title = 'Short lived'")
    assert _queued(path) == 0


async def test_the_catch_up_reads_the_queue_first_whatever_statistics_say(
    ctx: AppContext, wiring: Wiring, org: Org, database_url: str
) -> None:
    """With the statistics ``ANALYZE`` leaves (an operator's, or ``PRAGMA optimize``),
    taken while the queue was empty, SQLite planned the catch-up as a scan of every
    request looked up in the queue: each commit then read the whole table. The catch-up
    reads the queue and each queued request by its rowid, however large the table."""
    path = _path(database_url)
    mine = await _create(wiring, org, "Rotate keys")
    with sqlite3.connect(path) as db:
        db.execute(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 2000) "
            "INSERT INTO approval_requests (id, org_id, connection_id, title, description, "
            "status, priority, metadata, required_approvals, current_approvals, "
            "is_sequential, created_at, updated_at, comments_count, has_steps, number) "
            "SELECT lower(hex(randomblob(16))), org_id, connection_id, 'Copy ' || i, "
            "description, status, priority, metadata, required_approvals, current_approvals, "
            "is_sequential, created_at, updated_at, 0, 0, number + i FROM approval_requests, n "
            "WHERE id = ?",
            (mine,),
        )
        db.execute(SQLITE_CATCH_UP[0])
        db.execute(SQLITE_CATCH_UP[1])
        db.execute("ANALYZE")
    with sqlite3.connect(path) as db:
        plan = [row[3] for row in db.execute("EXPLAIN QUERY PLAN " + SQLITE_CATCH_UP[0])]
    assert plan[0].startswith("SCAN p"), plan
    assert plan[1].startswith("SEARCH r USING INTEGER PRIMARY KEY"), plan
    later = await _create(wiring, org, "Unrelated change")
    assert _found(path, "unrelated") == {later}
    assert len(_found(path, "copy")) == 2000


def _log_frames(path: str) -> int:
    """The pages a WAL file holds (its header, then a header and a page per frame)."""
    size = os.path.getsize(f"{path}-wal") if os.path.exists(f"{path}-wal") else 0
    return max(0, size - 32) // (24 + 4096)


async def test_a_commit_that_queued_no_request_writes_no_page_of_the_queue(
    ctx: AppContext, wiring: Wiring, org: Org, database_url: str, tmp_path: Path
) -> None:
    """Every transaction that writes runs the catch-up before its commit, most of them
    (decisions, votes, the audit sealer) with nothing queued: emptying the empty queue
    must not rewrite its page, one more page to the log and the checkpoint each commit."""
    await _create(wiring, org, "Rotate keys")
    copy = str(tmp_path / "copy.db")
    with sqlite3.connect(_path(database_url)) as source, sqlite3.connect(copy) as target:
        source.backup(target)

    def frames_of_a_commit(catch_up: bool) -> int:
        db = sqlite3.connect(copy, isolation_level=None)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA wal_autocheckpoint=0")
            before = _log_frames(copy)
            db.execute("BEGIN IMMEDIATE")
            db.execute("UPDATE organizations SET name = name || '.'")
            for statement in SQLITE_CATCH_UP if catch_up else ():
                db.execute(statement)
            db.execute("COMMIT")
            return _log_frames(copy) - before
        finally:
            db.close()

    frames_of_a_commit(catch_up=False)  # the first commit after the copy writes its header too
    assert frames_of_a_commit(catch_up=True) == frames_of_a_commit(catch_up=False)
