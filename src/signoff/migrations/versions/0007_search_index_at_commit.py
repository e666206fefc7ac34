"""the SQLite search index written once per transaction

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-25

Until now a trigger wrote each new request into the FTS5 table as it was inserted, and
FTS5 wrote a segment of the index for every writer's savepoint (``group_commit``). The
trigger now queues the request's rowid, and each transaction indexes what it queued just
before it commits (``signoff.approvals.search_index``;
docs/decisions/0008-search-index-written-once-per-transaction.md).

PostgreSQL is unchanged: its search vector is a generated column.
"""

from __future__ import annotations

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None

# The statements of this revision, kept here as they were written: the application's own
# (``search_index.SQLITE_CATCH_UP``) may change with later revisions.
_CATCH_UP = [
    "INSERT INTO approval_requests_fts (title, description, org_id, request_id, created_at) "
    "SELECT r.title, r.description, r.org_id, r.id, r.created_at "
    "FROM approval_requests_fts_pending AS p "
    "JOIN approval_requests AS r ON r.rowid = p.request_rowid "
    "ORDER BY p.request_rowid",
    "DELETE FROM approval_requests_fts_pending",
]

_QUEUED_AT_INSERT = [
    "CREATE TABLE approval_requests_fts_pending (request_rowid INTEGER PRIMARY KEY)",
    "CREATE TRIGGER approval_requests_fts_insert AFTER INSERT ON approval_requests BEGIN "
    "INSERT INTO approval_requests_fts_pending (request_rowid) VALUES (NEW.rowid); END",
    # A request deleted in the transaction that created it leaves nothing queued: its
    # rowid could otherwise name the next request inserted.
    "CREATE TRIGGER approval_requests_fts_delete AFTER DELETE ON approval_requests BEGIN "
    "DELETE FROM approval_requests_fts WHERE request_id = OLD.id; "
    "DELETE FROM approval_requests_fts_pending WHERE request_rowid = OLD.rowid; END",
]

# 0006's triggers, for the downgrade.
_WRITTEN_AT_INSERT = [
    "CREATE TRIGGER approval_requests_fts_insert AFTER INSERT ON approval_requests BEGIN "
    "INSERT INTO approval_requests_fts (title, description, org_id, request_id, created_at) "
    "VALUES (NEW.title, NEW.description, NEW.org_id, NEW.id, NEW.created_at); END",
    "CREATE TRIGGER approval_requests_fts_delete AFTER DELETE ON approval_requests BEGIN "
    "DELETE FROM approval_requests_fts WHERE request_id = OLD.id; END",
]


def upgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    _drop_triggers()
    for statement in _QUEUED_AT_INSERT:
        op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    # Anything still queued (written by a program that does not catch up) is indexed first.
    for statement in _CATCH_UP:
        op.execute(statement)
    _drop_triggers()
    op.execute("DROP TABLE approval_requests_fts_pending")
    for statement in _WRITTEN_AT_INSERT:
        op.execute(statement)


def _drop_triggers() -> None:
    op.execute("DROP TRIGGER IF EXISTS approval_requests_fts_delete")
    op.execute("DROP TRIGGER IF EXISTS approval_requests_fts_insert")
