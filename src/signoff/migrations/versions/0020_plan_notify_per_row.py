"""PostgreSQL: the plan rows' NOTIFY only when a plan row is written

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-26

A change writes its notification plan row only where its org can notify anyone
(``notifications/planning/repository.can_notify``): the insert is ``INSERT ... SELECT ... WHERE
EXISTS``, and for most orgs it writes nothing. A statement trigger (0015) fires for an
insert of no rows too, so such a change still woke every listening worker (and, on a
connection that notifies for itself, took the notification lock in its commit, 0019)
for a plan that does not exist. The trigger now fires per row written; PostgreSQL sends
one notification per transaction for identical ones, so a transaction of several plan
rows still sends one.
"""

from __future__ import annotations

from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

# The trigger and function of 0015 (the function as 0019 left it), kept here as written.
TRIGGER = "notification_plans_notify"
FUNCTION = "signoff_notify_notification_plans"


def _trigger(each: str) -> list[str]:
    return [
        f"DROP TRIGGER IF EXISTS {TRIGGER} ON notification_plans",
        f"CREATE TRIGGER {TRIGGER} AFTER INSERT ON notification_plans "
        f"FOR EACH {each} EXECUTE FUNCTION {FUNCTION}()",
    ]


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for statement in _trigger("ROW"):
        op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for statement in _trigger("STATEMENT"):
        op.execute(statement)
