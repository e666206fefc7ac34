"""approval_requests.preview and preview_hash: what the approver should look at

Revision ID: 0026
Revises: 0024
Create Date: 2026-11-28

A request may carry a preview, ``{"kind", "content"}`` (JSON, NULL without one), and the
hash of its RFC 8785 form, which a receipt can name. Both columns are nullable and have
no default, so adding them rewrites no row on either database; on SQLite they are added
with ``ALTER TABLE ... ADD COLUMN`` rather than batch mode, which would rebuild the table
and drop the search index's triggers.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None


def upgrade() -> None:
    json_type = sa.JSON().with_variant(JSONB(), "postgresql")
    op.add_column("approval_requests", sa.Column("preview", json_type, nullable=True))
    op.add_column("approval_requests", sa.Column("preview_hash", sa.String(64), nullable=True))


def downgrade() -> None:
    # SQLite drops a column in place (3.35+) as long as no index or trigger names it.
    op.drop_column("approval_requests", "preview_hash")
    op.drop_column("approval_requests", "preview")
