"""admin dashboard: who turned the emergency stop on, and the org-wide logs' indexes

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-25

``organizations.emergency_stop_at`` / ``emergency_stop_by``: the emergency-stop page
shows who turned the stop on and when. ``ix_audit_events_org_created`` and
``ix_webhook_deliveries_org_created``: the audit and delivery logs of one org, newest
first, without scanning every org's rows.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import signoff.models.base

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("organizations") as batch:
        batch.add_column(
            sa.Column(
                "emergency_stop_at",
                signoff.models.base.UTCDateTime(timezone=True),
                nullable=True,
            )
        )
        batch.add_column(sa.Column("emergency_stop_by", sa.Uuid(), nullable=True))
    op.create_index("ix_audit_events_org_created", "audit_events", ["org_id", "created_at"])
    op.create_index(
        "ix_webhook_deliveries_org_created", "webhook_deliveries", ["org_id", "created_at"]
    )


def downgrade() -> None:
    op.drop_index("ix_webhook_deliveries_org_created", table_name="webhook_deliveries")
    op.drop_index("ix_audit_events_org_created", table_name="audit_events")
    with op.batch_alter_table("organizations") as batch:
        batch.drop_column("emergency_stop_by")
        batch.drop_column("emergency_stop_at")
