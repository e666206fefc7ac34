"""full-text search narrowed by org (SQLite)

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-24

The FTS5 table of 0001 held every org's requests under one index, and a search found the
matches of every org before it joined their requests to keep the caller's: a search of
a small org cost as much as the installation's matches. The table now also indexes each
request's org id as a word of a column of its own, so the search asks FTS5 for the org's
matches alone, and keeps the request's ``created_at``, so an unfiltered search ranks and
counts its matches without reading the requests table
(docs/decisions/0008-search-index-written-once-per-transaction.md).

PostgreSQL is unchanged: its planner combines the GIN index with the org's index.
"""

from __future__ import annotations

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

_TOKENIZER = "tokenize = 'unicode61 remove_diacritics 2'"

# Self-contained, keyed by request id, as in 0001: an external-content table would key on
# the implicit rowid, which VACUUM may renumber for a table with a UUID primary key.
# ``org_id`` is stored as SQLite stores UUIDs (32 hex digits, one token); ``created_at``
# as the requests table stores it, so both sort alike.
SQLITE_SEARCH_BY_ORG = [
    "CREATE VIRTUAL TABLE approval_requests_fts USING fts5("
    "title, description, org_id, request_id UNINDEXED, created_at UNINDEXED, "
    f"{_TOKENIZER})",
    "INSERT INTO approval_requests_fts (title, description, org_id, request_id, created_at) "
    "SELECT title, description, org_id, id, created_at FROM approval_requests "
    "ORDER BY created_at, id",
    "CREATE TRIGGER approval_requests_fts_insert AFTER INSERT ON approval_requests BEGIN "
    "INSERT INTO approval_requests_fts (title, description, org_id, request_id, created_at) "
    "VALUES (NEW.title, NEW.description, NEW.org_id, NEW.id, NEW.created_at); END",
    # Titles and descriptions never change after creation; rows go only with their org.
    "CREATE TRIGGER approval_requests_fts_delete AFTER DELETE ON approval_requests BEGIN "
    "DELETE FROM approval_requests_fts WHERE request_id = OLD.id; END",
]

# 0001's table, for the downgrade.
SQLITE_SEARCH_OF_0001 = [
    "CREATE VIRTUAL TABLE approval_requests_fts USING fts5("
    f"title, description, request_id UNINDEXED, {_TOKENIZER})",
    "INSERT INTO approval_requests_fts (title, description, request_id) "
    "SELECT title, description, id FROM approval_requests ORDER BY created_at, id",
    "CREATE TRIGGER approval_requests_fts_insert AFTER INSERT ON approval_requests BEGIN "
    "INSERT INTO approval_requests_fts (title, description, request_id) "
    "VALUES (NEW.title, NEW.description, NEW.id); END",
    "CREATE TRIGGER approval_requests_fts_delete AFTER DELETE ON approval_requests BEGIN "
    "DELETE FROM approval_requests_fts WHERE request_id = OLD.id; END",
]


def _replace_search_table(statements: list[str]) -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    op.execute("DROP TRIGGER IF EXISTS approval_requests_fts_delete")
    op.execute("DROP TRIGGER IF EXISTS approval_requests_fts_insert")
    op.execute("DROP TABLE IF EXISTS approval_requests_fts")
    for statement in statements:
        op.execute(statement)


def upgrade() -> None:
    _replace_search_table(SQLITE_SEARCH_BY_ORG)


def downgrade() -> None:
    _replace_search_table(SQLITE_SEARCH_OF_0001)
