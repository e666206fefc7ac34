"""the inbox's index, when each connection was last used, OAuth tokens by user, audit types

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

``ix_oauth_tokens_user_id``: deactivating a user revokes every OAuth token of theirs in
one indexed update; the account page lists a person's authorizations by it too.

``ix_audit_events_org_type_created``: the audit page's type filter (its choices, found
one index seek per type, and one type's events newest first).
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
    op.create_index("ix_oauth_tokens_user_id", "oauth_tokens", ["user_id"])
    op.create_index(
        "ix_audit_events_org_type_created", "audit_events", ["org_id", "type", "created_at"]
    )
    op.add_column(
        "connections",
        sa.Column("last_used_at", signoff.models.base.UTCDateTime(timezone=True), nullable=True),
    )


def downgrade() -> None:
    with op.batch_alter_table("connections") as batch:
        batch.drop_column("last_used_at")
    op.drop_index("ix_audit_events_org_type_created", table_name="audit_events")
    op.drop_index("ix_oauth_tokens_user_id", table_name="oauth_tokens")
    op.drop_index(
        "ix_approval_requests_org_status_priority_created", table_name="approval_requests"
    )
