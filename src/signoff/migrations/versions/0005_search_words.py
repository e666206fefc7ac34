"""search: the same words on both engines

Revision ID: 0005
Revises: 0002
Create Date: 2026-11-23

PostgreSQL's text parser keeps host names, dotted labels, versions, e-mails and paths
whole ('api.example.com' is one lexeme), while SQLite's FTS5 tokenizer and our query
parser split them into words: on PostgreSQL a search for "example", or even for
"api.example.com" itself, found nothing. The vector now indexes the alphanumeric runs of
title and description, the words the query side searches for.

SQLite: puts back the full-text triggers that an earlier 0002 lost in a table copy, and
indexes the requests created meanwhile.
"""

from __future__ import annotations

from alembic import op

revision = "0005"
down_revision = "0002"
branch_labels = None
depends_on = None

# \: keeps SQLAlchemy from reading the character class as a bind parameter.
_WORDS = "regexp_replace(coalesce({column}, ''), '[^[\\:alnum\\:]]+', ' ', 'g')"
_VECTOR_OF_WORDS = (
    f"setweight(to_tsvector('simple', {_WORDS.format(column='title')}), 'A') || "
    f"setweight(to_tsvector('simple', {_WORDS.format(column='description')}), 'B')"
)
_VECTOR_OF_0001 = (
    "setweight(to_tsvector('simple', coalesce(title, '')), 'A') || "
    "setweight(to_tsvector('simple', coalesce(description, '')), 'B')"
)


def _replace_postgres_vector(expression: str) -> None:
    op.execute("DROP INDEX IF EXISTS ix_approval_requests_search")
    op.execute("ALTER TABLE approval_requests DROP COLUMN IF EXISTS search_vector")
    op.execute(
        "ALTER TABLE approval_requests ADD COLUMN search_vector tsvector "
        f"GENERATED ALWAYS AS ({expression}) STORED"
    )
    op.execute(
        "CREATE INDEX ix_approval_requests_search ON approval_requests USING GIN (search_vector)"
    )


def _repair_sqlite_search() -> None:
    op.execute(
        "CREATE TRIGGER IF NOT EXISTS approval_requests_fts_insert AFTER INSERT ON "
        "approval_requests BEGIN INSERT INTO approval_requests_fts (title, description, "
        "request_id) VALUES (NEW.title, NEW.description, NEW.id); END"
    )
    op.execute(
        "CREATE TRIGGER IF NOT EXISTS approval_requests_fts_delete AFTER DELETE ON "
        "approval_requests BEGIN DELETE FROM approval_requests_fts "
        "WHERE request_id = OLD.id; END"
    )
    op.execute(
        "INSERT INTO approval_requests_fts (title, description, request_id) "
        "SELECT title, description, id FROM approval_requests WHERE id NOT IN "
        "(SELECT request_id FROM approval_requests_fts)"
    )


def upgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        _repair_sqlite_search()
    else:
        _replace_postgres_vector(_VECTOR_OF_WORDS)


def downgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        _replace_postgres_vector(_VECTOR_OF_0001)
