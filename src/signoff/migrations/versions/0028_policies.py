"""policy_documents and policy_budget_usage: policies decide routine requests

Revision ID: 0028
Revises: 0027
Create Date: 2026-11-28

Two new tables, nothing rewritten: every saved version of an org's policy document
(unique per org and version, which is also the index the create path reads the version
in force through), and the budget counters of ``auto_approve`` rules, one row per rule,
scope and window, raised by a conditional upsert on its primary key.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

import signoff.models.base

revision = "0028"
down_revision = "0027"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # The version in force, beside the org's other settings the principal carries.
    op.add_column(
        "organizations",
        sa.Column("policy_version", sa.Integer(), nullable=False, server_default="0"),
    )
    json_type = sa.JSON().with_variant(JSONB(), "postgresql")
    op.create_table(
        "policy_documents",
        sa.Column("id", sa.Uuid(), primary_key=True),
        sa.Column(
            "org_id",
            sa.Uuid(),
            sa.ForeignKey("organizations.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("rules", json_type, nullable=False),
        sa.Column("author_id", sa.Uuid(), nullable=True),
        sa.Column("author_name", sa.String(200), nullable=True),
        sa.Column("restored_from", sa.Integer(), nullable=True),
        sa.Column("created_at", signoff.models.base.UTCDateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("org_id", "version"),
    )
    op.create_table(
        "policy_budget_usage",
        sa.Column(
            "org_id",
            sa.Uuid(),
            sa.ForeignKey("organizations.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("rule", sa.String(100), primary_key=True),
        sa.Column("scope_key", sa.String(200), primary_key=True),
        sa.Column("window_start", signoff.models.base.UTCDateTime(timezone=True), primary_key=True),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.Column("total", sa.Float(), nullable=False),
    )


def downgrade() -> None:
    op.drop_column("organizations", "policy_version")
    op.drop_table("policy_budget_usage")
    op.drop_table("policy_documents")
