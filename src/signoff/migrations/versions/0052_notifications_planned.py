"""Whether a request may have notifications scheduled (its create wrote a plan row)

Revision ID: 0052
Revises: 0051
Create Date: 2026-11-29

A decision voids its request's scheduled reminders, escalations and expiry warnings
(``cancel_scheduled``): one statement per decision, which writes nothing for a request
whose create wrote no plan row (its org had no channel, ``storage.channel_presence``) and
that never opened steps nor asked again. ``notifications_planned`` says whether the create
may have written one, so such a decision skips the statement. Existing rows, and every
PostgreSQL create (its plan is decided inside its insert), say true: the statement runs.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0052"
down_revision = "0051"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "approval_requests",
        sa.Column("notifications_planned", sa.Boolean(), nullable=False, server_default=sa.true()),
    )


def downgrade() -> None:
    op.drop_column("approval_requests", "notifications_planned")
