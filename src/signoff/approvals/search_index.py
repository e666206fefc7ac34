"""The SQLite search index of approval requests, brought up to date as a transaction commits.

Why not a trigger that writes the FTS5 table as each request is inserted (0001 to 0006):
FTS5 keeps new terms in memory until the transaction ends, but it writes them out at
every savepoint, and every writer of a shared transaction runs in a savepoint of its own
(``group_commit``). Each create thus wrote a segment of one request
to the index, and FTS5 merged those small segments as they piled up, all on the event
loop's thread: a create's SQLite work took markedly longer than with the index written
once per transaction, and in a large database a merge now and then held the loop long
enough to show in the creates' tail
(docs/decisions/0008-search-index-written-once-per-transaction.md).

How, since migration 0007: a trigger notes each new request's rowid in
``approval_requests_fts_pending``, a few microseconds. Just before a connection commits a
transaction that wrote, it runs ``SQLITE_CATCH_UP`` (``sqlite_driver``): the queued
requests are indexed in one statement and the queue emptied, in the same transaction, so
a search finds a request as soon as its create has committed, and a writer rolled back to
its savepoint leaves nothing queued. The writer connection commits in a worker thread, so
the index's work (tokenizing, writing a segment, merging segments) runs there.

A rowid names a request only within the transaction that queued it (VACUUM may renumber
rowids, never inside a transaction), which is all the queue needs: it is empty at every
commit. Requests written by some other program, which does not catch up, are indexed by
the next transaction of signoff that writes.
"""

from __future__ import annotations

# ``CROSS JOIN``: SQLite then reads the queue first and each queued request by its rowid,
# whatever statistics it holds. With the statistics ``ANALYZE`` (or ``PRAGMA optimize``)
# leaves, and the queue empty when they were taken, it read the whole requests table
# instead and looked each row up in the queue: every commit then cost a scan of the
# table (docs/decisions/0008-search-index-written-once-per-transaction.md).
SQLITE_CATCH_UP = (
    "INSERT INTO approval_requests_fts (title, description, org_id, request_id, created_at) "
    "SELECT r.title, r.description, r.org_id, r.id, r.created_at "
    "FROM approval_requests_fts_pending AS p "
    "CROSS JOIN approval_requests AS r ON r.rowid = p.request_rowid "
    "ORDER BY p.request_rowid",
    # A WHERE clause, true of every row, so that SQLite deletes the queued rows one by
    # one: without one it truncates the table, which rewrites its root page even when the
    # queue is empty, one more page to the log (and to the checkpoint) at every commit.
    "DELETE FROM approval_requests_fts_pending WHERE request_rowid IS NOT NULL",
)
