"""approval_requests.original_arguments and original_arguments_hash: approve with edits

Revision ID: 0027
Revises: 0026
Create Date: 2026-11-28

An approver may edit a request's arguments (within its ``arguments_schema``) as they
approve. The request's ``arguments`` and ``arguments_hash`` become the edited ones; the
arguments it was created with, and their hash, are kept here so that the original stays
readable and the callback can carry the patch from them. Both columns are nullable with
no default (NULL: never edited), so adding them rewrites no row; on SQLite they are added
with ``ALTER TABLE ... ADD COLUMN``, not batch mode, which would rebuild the table.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0027"
down_revision = "0026"
branch_labels = None
depends_on = None


def upgrade() -> None:
    json_type = sa.JSON().with_variant(JSONB(), "postgresql")
    op.add_column("approval_requests", sa.Column("original_arguments", json_type, nullable=True))
    op.add_column(
        "approval_requests", sa.Column("original_arguments_hash", sa.String(64), nullable=True)
    )


def downgrade() -> None:
    op.drop_column("approval_requests", "original_arguments_hash")
    op.drop_column("approval_requests", "original_arguments")
