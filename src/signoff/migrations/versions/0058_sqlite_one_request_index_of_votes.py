"""SQLite: one index of votes by request, unique per user and step

Revision ID: 0058
Revises: 0057
Create Date: 2026-11-29

Every vote wrote an entry of ``ix_votes_request_created`` (request_id, created_at), and a
count-based one another of ``uq_votes_request_user_count_based`` (request_id, user_id,
partial: ``step_id IS NULL``). On SQLite both give way to
``uq_votes_request_user_step`` on (request_id, user_id, coalesce(step_id, '')), an index of
every vote: unique, it holds the count-based rule as the partial index did (a step vote
differs by its step, which ``uq_votes_step_user`` keeps unique per user anyway); leading
with request_id, it serves the reads of a request's votes and the deletes a request's
delete cascades to, which a partial index could not. A request's few votes are sorted by
time as they are read.

PostgreSQL keeps both indexes (docs/decisions/0052-what-a-sqlite-decide-still-pays-for.md).
The index is built while the table is locked, which takes a while on a large table.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0058"
down_revision = "0057"
branch_labels = None
depends_on = None

_TABLE = "votes"
_MERGED = "uq_votes_request_user_step"


def _on_sqlite() -> bool:
    return op.get_bind().dialect.name == "sqlite"


def upgrade() -> None:
    if not _on_sqlite():
        return
    op.create_index(
        _MERGED,
        _TABLE,
        ["request_id", "user_id", sa.text("coalesce(step_id, '')")],
        unique=True,
    )
    op.drop_index("uq_votes_request_user_count_based", table_name=_TABLE)
    op.drop_index("ix_votes_request_created", table_name=_TABLE)


def downgrade() -> None:
    if not _on_sqlite():
        return
    op.create_index("ix_votes_request_created", _TABLE, ["request_id", "created_at"])
    op.create_index(
        "uq_votes_request_user_count_based",
        _TABLE,
        ["request_id", "user_id"],
        unique=True,
        sqlite_where=sa.text("step_id IS NULL"),
    )
    op.drop_index(_MERGED, table_name=_TABLE)
