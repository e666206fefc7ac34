"""notification_plans: a create's notifications are planned by a worker, not by the create

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-25

Planning a request's notifications (the routing rules, the channels, the org's members,
one row per person and channel, the reminders) made every create with routing on about
twice as slow as one without. The create now writes one ``notification_plans`` row in
its transaction; a worker plans it (``notifications/planning/service.plan_waiting``) and deletes
it in one transaction. The table holds only what waits to be planned (usually nothing),
so it has its primary key and no other index for the create to keep up.

On PostgreSQL a statement trigger sends ``NOTIFY signoff_notifications`` when plan rows
are inserted (delivered at the commit), so listening workers plan at once without the
create making a round trip of its own for it. SQLite workers in this process are woken by
the commit (``AppContext.transaction``); others poll.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import signoff.models.base

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

# The channel notification workers listen on (``notifications/planning/repository.NOTIFY_CHANNEL``),
# kept here as written.
NOTIFY_CHANNEL = "signoff_notifications"
NOTIFY_ON_PLAN = [
    "CREATE OR REPLACE FUNCTION signoff_notify_notification_plans() RETURNS trigger "
    "LANGUAGE plpgsql AS $$ BEGIN "
    f"PERFORM pg_notify('{NOTIFY_CHANNEL}', ''); RETURN NULL; END $$",
    "CREATE TRIGGER notification_plans_notify AFTER INSERT ON notification_plans "
    "FOR EACH STATEMENT EXECUTE FUNCTION signoff_notify_notification_plans()",
]


def upgrade() -> None:
    op.create_table(
        "notification_plans",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("request_id", sa.Uuid(), nullable=False),
        sa.Column("kind", sa.String(length=20), nullable=False),
        sa.Column("approver_ids", signoff.models.base.JSONType, nullable=True),
        sa.Column("created_at", signoff.models.base.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["request_id"],
            ["approval_requests.id"],
            name=op.f("fk_notification_plans_request_id_approval_requests"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_notification_plans")),
    )
    if op.get_bind().dialect.name == "postgresql":
        for statement in NOTIFY_ON_PLAN:
            op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER IF EXISTS notification_plans_notify ON notification_plans")
        op.execute("DROP FUNCTION IF EXISTS signoff_notify_notification_plans()")
    op.drop_table("notification_plans")
