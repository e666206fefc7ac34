"""A CIBA poll writes nothing: its pace moves to the rate limiter's store

Revision ID: 0041
Revises: 0037
Create Date: 2026-11-28

``oauth_backchannel_requests.next_poll_at`` made every poll an UPDATE, so a poll cost a
write transaction where reading a request costs a read. The interval between polls is now
counted where the other rate limits are (Redis when configured, shared by replicas; the
process's memory otherwise): the column is dropped (SQLite 3.35+ drops it in place).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import signoff.models.base

revision = "0041"
down_revision = "0037"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_column("oauth_backchannel_requests", "next_poll_at")


def downgrade() -> None:
    op.add_column(
        "oauth_backchannel_requests",
        sa.Column("next_poll_at", signoff.models.base.UTCDateTime(timezone=True), nullable=True),
    )
