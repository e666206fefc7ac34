"""the notification log keeps its channel's name and type on each row

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-27

Saving routing replaces the org's channels: a channel renamed or removed was deleted, and
its notifications with it (``ON DELETE CASCADE``), sent ones included, so the log of every
past request lost them. Each row now keeps the channel's name and type as they were when
it was planned (filled here from the channels as they are), and its ``channel_id`` is set
to NULL, not deleted, when the channel goes.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None

FOREIGN_KEY = "fk_notifications_channel_id_notification_channels"


def upgrade() -> None:
    with op.batch_alter_table("notifications", schema=None) as batch_op:
        batch_op.add_column(sa.Column("channel_name", sa.String(length=100), nullable=True))
        batch_op.add_column(sa.Column("channel_type", sa.String(length=16), nullable=True))
    op.execute(
        "UPDATE notifications SET "
        "channel_name = (SELECT c.name FROM notification_channels c "
        "WHERE c.id = notifications.channel_id), "
        "channel_type = (SELECT c.type FROM notification_channels c "
        "WHERE c.id = notifications.channel_id)"
    )
    # A row whose channel is gone cannot exist while foreign keys are enforced; should
    # one exist all the same, it says so rather than guess.
    op.execute(
        "UPDATE notifications SET channel_name = recipient, channel_type = 'unknown' "
        "WHERE channel_name IS NULL"
    )
    with op.batch_alter_table("notifications", schema=None) as batch_op:
        batch_op.alter_column("channel_name", existing_type=sa.String(length=100), nullable=False)
        batch_op.alter_column("channel_type", existing_type=sa.String(length=16), nullable=False)
        batch_op.alter_column("channel_id", existing_type=sa.Uuid(), nullable=True)
        batch_op.drop_constraint(FOREIGN_KEY, type_="foreignkey")
        batch_op.create_foreign_key(
            FOREIGN_KEY, "notification_channels", ["channel_id"], ["id"], ondelete="SET NULL"
        )


def downgrade() -> None:
    # The earlier schema has no row without a channel: those rows go, as they went then.
    op.execute(
        "DELETE FROM notification_attempts WHERE notification_id IN "
        "(SELECT id FROM notifications WHERE channel_id IS NULL)"
    )
    op.execute("DELETE FROM notifications WHERE channel_id IS NULL")
    with op.batch_alter_table("notifications", schema=None) as batch_op:
        batch_op.drop_constraint(FOREIGN_KEY, type_="foreignkey")
        batch_op.create_foreign_key(
            FOREIGN_KEY, "notification_channels", ["channel_id"], ["id"], ondelete="CASCADE"
        )
        batch_op.alter_column("channel_id", existing_type=sa.Uuid(), nullable=False)
        batch_op.drop_column("channel_type")
        batch_op.drop_column("channel_name")
