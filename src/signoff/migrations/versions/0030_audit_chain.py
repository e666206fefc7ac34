"""The hash-chained audit trail: audit_events.seq/prev_hash/hash, chain heads, checkpoints

Revision ID: 0030
Revises: 0029
Create Date: 2026-11-28

Events are written as before (seq NULL) and sealed into their org's chain by
``signoff.audit.service.seal`` (docs/audit.md): it locks the org's row in
``audit_chain_heads``, numbers the org's unsealed events and hashes each over the one
before. ``audit_checkpoints`` holds the signed heads. New columns are nullable with no
default and the rest are new tables, so nothing is rewritten on either database.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import signoff.models.base

revision = "0030"
down_revision = "0029"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("audit_events", sa.Column("seq", sa.BigInteger(), nullable=True))
    op.add_column("audit_events", sa.Column("prev_hash", sa.String(64), nullable=True))
    op.add_column("audit_events", sa.Column("hash", sa.String(64), nullable=True))
    # One event per (org, seq): a fork cannot be written. NULLs (unsealed) do not collide.
    op.create_index("ux_audit_events_org_seq", "audit_events", ["org_id", "seq"], unique=True)
    # The sealer's scan for unsealed events (seq IS NULL), by org.
    op.create_index("ix_audit_events_seq_org", "audit_events", ["seq", "org_id"])
    op.create_table(
        "audit_chain_heads",
        sa.Column(
            "org_id",
            sa.Uuid(),
            sa.ForeignKey("organizations.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("hash", sa.String(64), nullable=False),
        sa.Column("checkpoint_seq", sa.BigInteger(), nullable=False),
        sa.Column("checkpoint_at", signoff.models.base.UTCDateTime(timezone=True), nullable=True),
        sa.Column("verified_seq", sa.BigInteger(), nullable=False),
        sa.Column("verified_hash", sa.String(64), nullable=False),
        sa.Column("verified_at", signoff.models.base.UTCDateTime(timezone=True), nullable=True),
        sa.Column("verify_failed_seq", sa.BigInteger(), nullable=True),
    )
    op.create_table(
        "audit_checkpoints",
        sa.Column("id", sa.Uuid(), primary_key=True),
        sa.Column(
            "org_id",
            sa.Uuid(),
            sa.ForeignKey("organizations.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("hash", sa.String(64), nullable=False),
        sa.Column("jws", sa.Text(), nullable=False),
        sa.Column("created_at", signoff.models.base.UTCDateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_audit_checkpoints_org_seq", "audit_checkpoints", ["org_id", "seq"])


def downgrade() -> None:
    op.drop_index("ix_audit_checkpoints_org_seq", table_name="audit_checkpoints")
    op.drop_table("audit_checkpoints")
    op.drop_table("audit_chain_heads")
    op.drop_index("ix_audit_events_seq_org", table_name="audit_events")
    op.drop_index("ux_audit_events_org_seq", table_name="audit_events")
    op.drop_column("audit_events", "hash")
    op.drop_column("audit_events", "prev_hash")
    op.drop_column("audit_events", "seq")
