"""SQLite: the group steps' index holds group steps only

Revision ID: 0059
Revises: 0058
Create Date: 2026-11-29

``ix_approval_steps_group_status`` held an entry for every step, a person's too (its
``group_id`` NULL), which no query reads: its readers look steps up by group (the
foreign key's ``ON DELETE SET NULL`` when a group goes, ``group_id = ?``), which SQLite
answers from an index that holds group steps only. A chain of people wrote an entry per
step, and moved it at each vote; now it writes none.

PostgreSQL keeps the index whole, as for 0054
(docs/decisions/0053-what-a-chain-pays-for-on-either-database.md). The index keeps its
name and is rebuilt, which takes a while on a large table.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0059"
down_revision = "0058"
branch_labels = None
depends_on = None

_TABLE = "approval_steps"
_INDEX = "ix_approval_steps_group_status"
_COLUMNS = ["group_id", "status"]


def _rebuild(partial: bool) -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    op.drop_index(_INDEX, table_name=_TABLE)
    where = sa.text("group_id IS NOT NULL") if partial else None
    op.create_index(_INDEX, _TABLE, _COLUMNS, sqlite_where=where)


def upgrade() -> None:
    _rebuild(partial=True)


def downgrade() -> None:
    _rebuild(partial=False)
