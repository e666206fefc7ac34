"""A standing approval's use is taken by the insert of the request it approves (SQLite)

Revision ID: 0051
Revises: 0048
Create Date: 2026-11-29

On SQLite a create reads the live standing approvals inside its write transaction, which
holds the database's one write lock (``BEGIN IMMEDIATE``): what it read cannot change
before its insert, so the conditional ``UPDATE`` that took the use was a statement only
to count. A trigger counts it instead, in the request's own insert, and only for a row
inserted (a replayed idempotency key inserts none, and takes no use).
PostgreSQL keeps the conditional ``UPDATE``: there concurrent creates read the same row
(``policies/standing_repository.py``).
"""

from __future__ import annotations

from alembic import op

revision = "0051"
down_revision = "0048"
branch_labels = None
depends_on = None

# Hand-managed like the request counts (0005): the models do not describe it.
SQLITE_USE_TRIGGER = (
    "CREATE TRIGGER standing_approval_use AFTER INSERT ON approval_requests "
    "WHEN NEW.standing_approval_id IS NOT NULL BEGIN "
    "UPDATE standing_approvals SET uses = uses + 1 WHERE id = NEW.standing_approval_id; END"
)


def upgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.execute(SQLITE_USE_TRIGGER)


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.execute("DROP TRIGGER IF EXISTS standing_approval_use")
