"""approval_requests.auto_approved: false until approval policies exist

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-25

Existing clients of the interface read ``auto_approved`` on every request. No request is
approved by a policy yet, so every row reads false; the policies work will set it.

Added with ``ALTER TABLE ... ADD COLUMN`` on both databases rather than SQLite's batch
mode: a batch rebuilds the table, and with it would go the search index's triggers.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "approval_requests",
        sa.Column("auto_approved", sa.Boolean(), nullable=False, server_default=sa.false()),
    )


def downgrade() -> None:
    op.drop_column("approval_requests", "auto_approved")
