"""dashboard: deactivated users and the first-run setup link

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-25

``users.deactivated_at``: a deactivated user can no longer sign in and their dashboard
sessions end at once. ``setup_tokens``: the hashed one-time link that ``signoff serve``
logs on an empty database, to create the first organization and admin in a browser.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import signoff.models.base

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def _utc(name: str, nullable: bool) -> sa.Column[object]:
    return sa.Column(name, signoff.models.base.UTCDateTime(timezone=True), nullable=nullable)


def upgrade() -> None:
    with op.batch_alter_table("users") as batch:
        batch.add_column(_utc("deactivated_at", nullable=True))
    op.create_table(
        "setup_tokens",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        _utc("created_at", nullable=False),
        _utc("used_at", nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_setup_tokens")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_setup_tokens_token_hash")),
    )


def downgrade() -> None:
    op.drop_table("setup_tokens")
    with op.batch_alter_table("users") as batch:
        batch.drop_column("deactivated_at")
