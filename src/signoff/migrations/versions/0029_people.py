"""organizations.self_approval, and users' out-of-office delegation

Revision ID: 0029
Revises: 0031
Create Date: 2026-11-28

``organizations.self_approval`` ("allow" or "forbid", default "allow": every existing org
keeps today's behaviour) and ``users.away_from`` / ``away_until`` / ``delegate_id``, with
an index on ``delegate_id`` for the inbox's "who do I stand in for" lookup. Columns are
added with ``ALTER TABLE ... ADD COLUMN`` on both databases, never a table rebuild.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import signoff.models.base

revision = "0029"
down_revision = "0031"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "organizations",
        sa.Column("self_approval", sa.String(16), nullable=False, server_default="allow"),
    )
    op.add_column(
        "users",
        sa.Column("away_from", signoff.models.base.UTCDateTime(timezone=True), nullable=True),
    )
    op.add_column(
        "users",
        sa.Column("away_until", signoff.models.base.UTCDateTime(timezone=True), nullable=True),
    )
    # No foreign key: SQLite adds none without a rebuild, and users are deactivated,
    # never deleted one by one (an org's deletion takes them all).
    op.add_column("users", sa.Column("delegate_id", sa.Uuid(), nullable=True))
    op.create_index("ix_users_delegate_id", "users", ["delegate_id"])
    op.create_index("ix_connections_owner_id", "connections", ["owner_id"])


def downgrade() -> None:
    op.drop_index("ix_connections_owner_id", table_name="connections")
    op.drop_index("ix_users_delegate_id", table_name="users")
    op.drop_column("users", "delegate_id")
    op.drop_column("users", "away_until")
    op.drop_column("users", "away_from")
    op.drop_column("organizations", "self_approval")
