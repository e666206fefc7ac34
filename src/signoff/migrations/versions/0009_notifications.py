"""notifications: routing rules, channels, the notification outbox, one-click links

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-25

Notifications (docs/notifications.md): each org's routing document and channels (their
secrets encrypted), the outbox of notifications with the log of their attempts (claimed
with a lease like callback deliveries), and the hashed one-click decision links.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

import signoff.models.base

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "notification_channels",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("org_id", sa.Uuid(), nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("type", sa.String(length=16), nullable=False),
        sa.Column("config_encrypted", sa.Text(), nullable=False),
        sa.Column("created_at", signoff.models.base.UTCDateTime(timezone=True), nullable=False),
        sa.Column("updated_at", signoff.models.base.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["org_id"],
            ["organizations.id"],
            name=op.f("fk_notification_channels_org_id_organizations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_notification_channels")),
        sa.UniqueConstraint("org_id", "name", name=op.f("uq_notification_channels_org_id_name")),
    )
    op.create_table(
        "routing_configs",
        sa.Column("org_id", sa.Uuid(), nullable=False),
        sa.Column(
            "document",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("updated_at", signoff.models.base.UTCDateTime(timezone=True), nullable=False),
        sa.Column("updated_by", sa.Uuid(), nullable=True),
        sa.ForeignKeyConstraint(
            ["org_id"],
            ["organizations.id"],
            name=op.f("fk_routing_configs_org_id_organizations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("org_id", name=op.f("pk_routing_configs")),
    )
    op.create_table(
        "decision_links",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("org_id", sa.Uuid(), nullable=False),
        sa.Column("request_id", sa.Uuid(), nullable=False),
        sa.Column("user_id", sa.Uuid(), nullable=True),
        sa.Column("decision", sa.String(length=16), nullable=False),
        sa.Column("via", sa.String(length=16), nullable=False),
        sa.Column("require_sign_in", sa.Boolean(), nullable=False),
        sa.Column("expires_at", signoff.models.base.UTCDateTime(timezone=True), nullable=False),
        sa.Column("created_at", signoff.models.base.UTCDateTime(timezone=True), nullable=False),
        sa.Column("used_at", signoff.models.base.UTCDateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["org_id"],
            ["organizations.id"],
            name=op.f("fk_decision_links_org_id_organizations"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["request_id"],
            ["approval_requests.id"],
            name=op.f("fk_decision_links_request_id_approval_requests"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["user_id"],
            ["users.id"],
            name=op.f("fk_decision_links_user_id_users"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_decision_links")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_decision_links_token_hash")),
    )
    with op.batch_alter_table("decision_links", schema=None) as batch_op:
        batch_op.create_index("ix_decision_links_request", ["request_id"], unique=False)

    op.create_table(
        "notifications",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("org_id", sa.Uuid(), nullable=False),
        sa.Column("request_id", sa.Uuid(), nullable=False),
        sa.Column("channel_id", sa.Uuid(), nullable=False),
        sa.Column("kind", sa.String(length=20), nullable=False),
        sa.Column("recipient", sa.String(length=320), nullable=False),
        sa.Column("recipient_user_id", sa.Uuid(), nullable=True),
        sa.Column("require_sign_in", sa.Boolean(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("due_at", signoff.models.base.UTCDateTime(timezone=True), nullable=False),
        sa.Column("claim_token", sa.Uuid(), nullable=True),
        sa.Column("created_at", signoff.models.base.UTCDateTime(timezone=True), nullable=False),
        sa.Column("updated_at", signoff.models.base.UTCDateTime(timezone=True), nullable=False),
        sa.Column("sent_at", signoff.models.base.UTCDateTime(timezone=True), nullable=True),
        sa.Column("last_error", sa.String(length=200), nullable=True),
        sa.ForeignKeyConstraint(
            ["channel_id"],
            ["notification_channels.id"],
            name=op.f("fk_notifications_channel_id_notification_channels"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["org_id"],
            ["organizations.id"],
            name=op.f("fk_notifications_org_id_organizations"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["request_id"],
            ["approval_requests.id"],
            name=op.f("fk_notifications_request_id_approval_requests"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_notifications")),
    )
    with op.batch_alter_table("notifications", schema=None) as batch_op:
        batch_op.create_index(
            "ix_notifications_pending_due",
            ["due_at"],
            unique=False,
            sqlite_where=sa.text("status = 'pending'"),
            postgresql_where=sa.text("status = 'pending'"),
        )
        batch_op.create_index(
            "ix_notifications_request_created", ["request_id", "created_at"], unique=False
        )

    op.create_table(
        "notification_attempts",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("notification_id", sa.Uuid(), nullable=False),
        sa.Column("request_id", sa.Uuid(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("success", sa.Boolean(), nullable=False),
        sa.Column("status_code", sa.Integer(), nullable=False),
        sa.Column("duration_ms", sa.Integer(), nullable=False),
        sa.Column("error", sa.String(length=200), nullable=True),
        sa.Column("created_at", signoff.models.base.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["notification_id"],
            ["notifications.id"],
            name=op.f("fk_notification_attempts_notification_id_notifications"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["request_id"],
            ["approval_requests.id"],
            name=op.f("fk_notification_attempts_request_id_approval_requests"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_notification_attempts")),
        sa.UniqueConstraint(
            "notification_id",
            "attempt",
            name=op.f("uq_notification_attempts_notification_id_attempt"),
        ),
    )
    with op.batch_alter_table("notification_attempts", schema=None) as batch_op:
        batch_op.create_index(
            "ix_notification_attempts_request_created", ["request_id", "created_at"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("notification_attempts", schema=None) as batch_op:
        batch_op.drop_index("ix_notification_attempts_request_created")

    op.drop_table("notification_attempts")
    with op.batch_alter_table("notifications", schema=None) as batch_op:
        batch_op.drop_index("ix_notifications_request_created")
        batch_op.drop_index(
            "ix_notifications_pending_due",
            sqlite_where=sa.text("status = 'pending'"),
            postgresql_where=sa.text("status = 'pending'"),
        )

    op.drop_table("notifications")
    with op.batch_alter_table("decision_links", schema=None) as batch_op:
        batch_op.drop_index("ix_decision_links_request")

    op.drop_table("decision_links")
    op.drop_table("routing_configs")
    op.drop_table("notification_channels")
