"""audit_events.request_id may be NULL: events of the org itself (policy and routing
versions, emergency stops, connections, users, settings, passkeys) join its chain; and
approval_requests.passkey_required

Revision ID: 0036
Revises: 0030
Create Date: 2026-11-28

On SQLite the column's NOT NULL goes with a batch (copy-and-move) rebuild of the table.
``approval_requests.passkey_required``: a policy rule asked that the request's decisions
be signed with a passkey (added with ``ADD COLUMN``, no rebuild).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0036"
down_revision = "0032"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("audit_events") as batch_op:
        batch_op.alter_column("request_id", existing_type=sa.Uuid(), nullable=True)
    op.add_column(
        "approval_requests",
        sa.Column("passkey_required", sa.Boolean(), nullable=False, server_default=sa.false()),
    )


def downgrade() -> None:
    op.drop_column("approval_requests", "passkey_required")
    op.execute("DELETE FROM audit_events WHERE request_id IS NULL")
    with op.batch_alter_table("audit_events") as batch_op:
        batch_op.alter_column("request_id", existing_type=sa.Uuid(), nullable=False)
