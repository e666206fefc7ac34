"""SQLite: the decided index holds decided requests only, the inbox's pending ones only

Revision ID: 0054
Revises: 0052
Create Date: 2026-11-29

Every SQLite create wrote an entry of ``ix_approval_requests_org_decided`` for a request
with no ``decided_at``, which no query reads: each one that reads the index (a list's
decided window, the retention purge) compares ``decided_at`` with a bound, so SQLite
also reads it when it holds decided requests only. Every decision then moved that entry
to its decision time; now it adds one.

``ix_approval_requests_org_status_priority_created`` serves the inbox, which reads
pending requests only (``status = 'pending'``, a literal): a decision moved its entry to
the new status; now it removes it.

PostgreSQL keeps both indexes whole (docs/decisions/0045-fewer-index-entries-per-sqlite-write.md).
Each index keeps its name and is rebuilt, which takes a while on a large table.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0054"
down_revision = "0052"
branch_labels = None
depends_on = None

_TABLE = "approval_requests"
# Each index: its columns, and the rows SQLite keeps in it from now on.
_INDEXES = {
    "ix_approval_requests_org_decided": (
        ["org_id", "decided_at", "status", "created_at"],
        "decided_at IS NOT NULL",
    ),
    "ix_approval_requests_org_status_priority_created": (
        ["org_id", "status", "priority", "created_at", "id"],
        "status = 'pending'",
    ),
}


def _rebuild(partial: bool) -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    for name, (columns, where) in _INDEXES.items():
        op.drop_index(name, table_name=_TABLE)
        op.create_index(name, _TABLE, columns, sqlite_where=sa.text(where) if partial else None)


def upgrade() -> None:
    _rebuild(partial=True)


def downgrade() -> None:
    _rebuild(partial=False)
