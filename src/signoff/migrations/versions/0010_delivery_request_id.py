"""the request id a callback carries

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-25

Each delivery keeps the id of the API request (``X-Request-Id``) whose transition it
reports, and sends it as ``X-Request-Id`` on every attempt, retries by other processes
included. Nullable: deliveries written before this revision have none.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("webhook_deliveries", schema=None) as batch_op:
        batch_op.add_column(sa.Column("request_id_header", sa.String(length=128), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("webhook_deliveries", schema=None) as batch_op:
        batch_op.drop_column("request_id_header")
