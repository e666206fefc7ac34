"""Standing approvals ("don't ask again for..."): the table, the request's
``standing_approval_id``, and the org's grant counter and caps

Revision ID: 0038
Revises: 0041
Create Date: 2026-11-28

``organizations.standing_approvals_granted`` travels with the principal (like
``policy_version``), so a create in an org that never granted one reads nothing more.
Every change is an ``ADD COLUMN`` or a new table: no rebuild on SQLite.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from signoff.models.base import UTCDateTime

revision = "0038"
down_revision = "0041"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
LIVE = sa.text("revoked_at IS NULL")


def upgrade() -> None:
    op.create_table(
        "standing_approvals",
        sa.Column("id", sa.Uuid(), primary_key=True),
        sa.Column(
            "org_id",
            sa.Uuid(),
            sa.ForeignKey("organizations.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column(
            "connection_id",
            sa.Uuid(),
            sa.ForeignKey("connections.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("action_type", sa.String(100), nullable=False),
        sa.Column("arguments", JSON, nullable=False),
        sa.Column("expires_at", UTCDateTime(timezone=True), nullable=True),
        sa.Column("max_uses", sa.Integer(), nullable=True),
        sa.Column("uses", sa.Integer(), nullable=False),
        sa.Column("granted_by", sa.Uuid(), nullable=False),
        sa.Column("granted_by_name", sa.String(200), nullable=False),
        sa.Column("request_id", sa.Uuid(), nullable=False),
        sa.Column("created_at", UTCDateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", UTCDateTime(timezone=True), nullable=True),
        sa.Column("revoked_by", sa.Uuid(), nullable=True),
    )
    op.create_index(
        "ix_standing_approvals_lookup",
        "standing_approvals",
        ["org_id", "connection_id", "action_type", "expires_at"],
        sqlite_where=LIVE,
        postgresql_where=LIVE,
    )
    op.create_index(
        "ix_standing_approvals_org_created",
        "standing_approvals",
        ["org_id", "created_at"],
        sqlite_where=LIVE,
        postgresql_where=LIVE,
    )
    op.add_column("approval_requests", sa.Column("standing_approval_id", sa.Uuid(), nullable=True))
    op.add_column(
        "organizations",
        sa.Column("standing_approvals_granted", sa.Integer(), nullable=False, server_default="0"),
    )
    op.add_column("organizations", sa.Column("standing_approval_caps", JSON, nullable=True))


def downgrade() -> None:
    op.drop_column("organizations", "standing_approval_caps")
    op.drop_column("organizations", "standing_approvals_granted")
    op.drop_column("approval_requests", "standing_approval_id")
    op.drop_index("ix_standing_approvals_org_created", "standing_approvals")
    op.drop_index("ix_standing_approvals_lookup", "standing_approvals")
    op.drop_table("standing_approvals")
