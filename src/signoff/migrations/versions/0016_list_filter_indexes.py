"""list filters read from their index alone: each filter's index carries the other filters

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-25

A list page filtered by two values (a status and a priority, say) was read through one
value's index, and every request that index chose was then read from the table to test
the other value: a page's total, counted up to 10,001 matches, read that many rows of
the table or more (tens of thousands in an org of a million requests). The four filter
indexes now also hold the columns the other filters test (status, priority, action
type, source, and the deadline that decides whether a pending request reads as
expired), so SQLite and PostgreSQL test every filter in the index and read from the table
only the requests a page shows (docs/decisions/0009-list-pages-index-hints-and-the-1m-row-org.md).
The index of
decision times holds the status and the creation time too: a decided window with a
status is counted in it alone.

The indexes keep their names; each is rebuilt, which takes a while on a large table.

SQLite also gets ``approval_requests_fts_terms``, an ``fts5vocab`` table over the search
index (it stores nothing): a search looks up the indexed words its terms are a prefix of
and asks FTS5 for those words, which it reads lazily, rather than for the prefix, whose
matches FTS5 gathers in full first (``listing._sqlite_word_forms``).
"""

from __future__ import annotations

from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

_FILTERS = ("status", "priority", "action_type", "source")


def _columns(column: str) -> list[str]:
    """The index of ``column``: the org, it, the list order, then what other filters test."""
    others = [other for other in _FILTERS if other != column]
    return ["org_id", column, "created_at", *others, "expires_at"]


def _rebuild(columns_of: dict[str, list[str]]) -> None:
    for name, columns in columns_of.items():
        op.drop_index(name, table_name="approval_requests")
        op.create_index(name, "approval_requests", columns)


_TERMS = (
    "CREATE VIRTUAL TABLE approval_requests_fts_terms USING fts5vocab(approval_requests_fts, 'row')"
)


_DECIDED = "ix_approval_requests_org_decided"


def upgrade() -> None:
    indexes = {f"ix_approval_requests_org_{c}_created": _columns(c) for c in _FILTERS}
    indexes[_DECIDED] = ["org_id", "decided_at", "status", "created_at"]
    _rebuild(indexes)
    if op.get_bind().dialect.name == "sqlite":
        op.execute(_TERMS)


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.execute("DROP TABLE IF EXISTS approval_requests_fts_terms")
    indexes = {
        f"ix_approval_requests_org_{c}_created": ["org_id", c, "created_at"] for c in _FILTERS
    }
    indexes[_DECIDED] = ["org_id", "decided_at"]
    _rebuild(indexes)
