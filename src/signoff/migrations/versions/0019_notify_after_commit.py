"""PostgreSQL: a connection may take over its triggers' NOTIFYs and send them after commit

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-25

A transaction that sends NOTIFY takes one lock for the whole database (the notification
queue's) in its commit and holds it until the commit is on disk: such commits are made
one after another, each waiting for its own flush of the write-ahead log, where commits
without one share a flush. Every create (its notification plan row, 0015) and every
decision (its status change, 0011) notified, so the creates and decisions of all
connections queued on that one lock, and the API's tail latency was the queue's
(docs/decisions/0014-notify-after-commit-and-the-notifier.md).

The two trigger functions now stay silent on a connection that says it sends these
notifications itself after its commits, by the setting ``signoff.notify_after_commit =
'on'`` (``storage.asyncpg_shape``: the hot path's autocommit connections, whose writers
the process tells the others about in batches, ``storage.notifications.Notifier``). Every
other connection (the CLI, a worker, an older replica, psql) notifies as before.
"""

from __future__ import annotations

from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None

# The channels and functions of 0011 and 0015, kept here as written.
REQUEST_CHANNEL = "signoff_requests"
PLAN_CHANNEL = "signoff_notifications"
SETTING = "signoff.notify_after_commit"


def _function(name: str, notify: str, *, unless_deferred: bool) -> str:
    body = f"PERFORM {notify};"
    if unless_deferred:
        body = f"IF current_setting('{SETTING}', true) IS DISTINCT FROM 'on' THEN {body} END IF;"
    return (
        f"CREATE OR REPLACE FUNCTION {name}() RETURNS trigger "
        f"LANGUAGE plpgsql AS $$ BEGIN {body} RETURN NULL; END $$"
    )


def _functions(*, unless_deferred: bool) -> list[str]:
    return [
        _function(
            "signoff_notify_request_changed",
            f"pg_notify('{REQUEST_CHANNEL}', NEW.id::text)",
            unless_deferred=unless_deferred,
        ),
        _function(
            "signoff_notify_notification_plans",
            f"pg_notify('{PLAN_CHANNEL}', '')",
            unless_deferred=unless_deferred,
        ),
    ]


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for statement in _functions(unless_deferred=True):
        op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for statement in _functions(unless_deferred=False):
        op.execute(statement)
