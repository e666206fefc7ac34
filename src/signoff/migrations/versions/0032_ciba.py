"""OpenID CIBA: clients allowed to use it, and backchannel authentication requests

Revision ID: 0032
Revises: 0030
Create Date: 2026-11-28

``oauth_clients`` gains ``ciba_enabled``, ``ciba_delivery_mode`` ("poll" or "ping") and
``ciba_notification_endpoint`` (added with ``ALTER TABLE ... ADD COLUMN``: no table rebuild
on SQLite). ``oauth_backchannel_requests``: one row per CIBA request, keyed by the approval
request it created, with the client that may poll it and when it may next poll
(``slow_down`` across replicas).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import signoff.models.base

revision = "0032"
down_revision = "0030"
branch_labels = None
depends_on = None


def _utc(name: str, nullable: bool) -> sa.Column[object]:
    return sa.Column(name, signoff.models.base.UTCDateTime(timezone=True), nullable=nullable)


def upgrade() -> None:
    op.add_column(
        "oauth_clients",
        sa.Column("ciba_enabled", sa.Boolean(), nullable=False, server_default=sa.false()),
    )
    op.add_column("oauth_clients", sa.Column("ciba_delivery_mode", sa.String(10), nullable=True))
    op.add_column(
        "oauth_clients", sa.Column("ciba_notification_endpoint", sa.Text(), nullable=True)
    )
    op.create_table(
        "oauth_backchannel_requests",
        sa.Column("request_id", sa.Uuid(), nullable=False),
        sa.Column("client_pk", sa.Uuid(), nullable=False),
        sa.Column("user_id", sa.Uuid(), nullable=False),
        sa.Column("scope", sa.String(length=200), nullable=False),
        _utc("created_at", nullable=False),
        _utc("expires_at", nullable=False),
        _utc("next_poll_at", nullable=True),
        _utc("token_issued_at", nullable=True),
        sa.ForeignKeyConstraint(
            ["request_id"],
            ["approval_requests.id"],
            name=op.f("fk_oauth_backchannel_requests_request_id_approval_requests"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["client_pk"],
            ["oauth_clients.id"],
            name=op.f("fk_oauth_backchannel_requests_client_pk_oauth_clients"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["user_id"],
            ["users.id"],
            name=op.f("fk_oauth_backchannel_requests_user_id_users"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("request_id", name=op.f("pk_oauth_backchannel_requests")),
    )


def downgrade() -> None:
    op.drop_table("oauth_backchannel_requests")
    op.drop_column("oauth_clients", "ciba_notification_endpoint")
    op.drop_column("oauth_clients", "ciba_delivery_mode")
    op.drop_column("oauth_clients", "ciba_enabled")
