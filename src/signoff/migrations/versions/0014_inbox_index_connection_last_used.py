"""the inbox's index, and when each connection was last used

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-25

``ix_approval_requests_org_status_priority_created``: an approver's inbox reads each
priority's pending requests oldest first and stops once its page is full, rather than
sorting every waiting request (``approvals/listing.py``, ``read_inbox``).

``connections.last_used_at``: when the connection's API key last authenticated a call,
recorded at most once a minute per connection (``auth/last_used.py``); NULL for a
connection never used since. Added with ``ADD COLUMN`` on both databases: a batch would
rebuild the table.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import signoff.models.base

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "ix_approval_requests_org_status_priority_created",
        "approval_requests",
        ["org_id", "status", "priority", "created_at", "id"],
    )
    op.add_column(
        "connections",
        sa.Column("last_used_at", signoff.models.base.UTCDateTime(timezone=True), nullable=True),
    )


def downgrade() -> None:
    with op.batch_alter_table("connections") as batch:
        batch.drop_column("last_used_at")
    op.drop_index(
        "ix_approval_requests_org_status_priority_created", table_name="approval_requests"
    )
