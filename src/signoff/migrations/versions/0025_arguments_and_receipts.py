"""arguments of a request, signed approval receipts and their signing keys

Revision ID: 0025
Revises: 0024
Create Date: 2026-11-28

``approval_requests`` gains the arguments the action will run with, their JSON Schema,
their hash (every existing request: the hash of ``{}``), whether they were edited, and the
lifetime of the receipt its approval issues. ``signing_keys`` holds the Ed25519 keys
(private halves encrypted with the app's secret box); ``receipts`` one row per issued
receipt, counting its redeems. ``webhook_deliveries.receipt_encrypted``: the receipt a
decision callback carries, kept out of the stored body.

Columns are added with ``ALTER TABLE ... ADD COLUMN`` (``op.add_column``) on both
databases, not SQLite's batch mode, which would rebuild ``approval_requests`` and drop the
search index's triggers.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import signoff.models.base
from signoff.models.base import JSONType

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None

EMPTY_ARGUMENTS_HASH = "sha-256:RBNvo1WzZ4oRRq0W9-hknpT7T8If536DEMBg9hyq_4o"


def _utc(name: str, nullable: bool) -> sa.Column[object]:
    return sa.Column(name, signoff.models.base.UTCDateTime(timezone=True), nullable=nullable)


def upgrade() -> None:
    op.add_column("approval_requests", sa.Column("arguments", JSONType, nullable=True))
    op.add_column("approval_requests", sa.Column("arguments_schema", JSONType, nullable=True))
    op.add_column(
        "approval_requests",
        sa.Column(
            "arguments_hash",
            sa.String(length=64),
            nullable=False,
            server_default=EMPTY_ARGUMENTS_HASH,
        ),
    )
    op.add_column(
        "approval_requests",
        sa.Column("arguments_edited", sa.Boolean(), nullable=False, server_default=sa.false()),
    )
    op.add_column(
        "approval_requests",
        sa.Column("receipt_ttl_seconds", sa.Integer(), nullable=False, server_default="900"),
    )
    op.add_column("webhook_deliveries", sa.Column("receipt_encrypted", sa.Text(), nullable=True))
    op.create_table(
        "signing_keys",
        sa.Column("kid", sa.String(length=64), nullable=False),
        sa.Column("public_jwk", JSONType, nullable=False),
        sa.Column("private_key_encrypted", sa.Text(), nullable=False),
        _utc("created_at", nullable=False),
        sa.Column("current", sa.Boolean(), nullable=True),
        _utc("retired_at", nullable=True),
        sa.PrimaryKeyConstraint("kid", name=op.f("pk_signing_keys")),
        sa.UniqueConstraint("current", name=op.f("uq_signing_keys_current")),
    )
    op.create_table(
        "receipts",
        sa.Column("jti", sa.Uuid(), nullable=False),
        sa.Column("request_id", sa.Uuid(), nullable=False),
        sa.Column("org_id", sa.Uuid(), nullable=False),
        sa.Column("kid", sa.String(length=64), nullable=False),
        sa.Column("token_encrypted", sa.Text(), nullable=False),
        _utc("issued_at", nullable=False),
        _utc("expires_at", nullable=False),
        sa.Column("max_uses", sa.Integer(), nullable=False),
        sa.Column("uses", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["request_id"],
            ["approval_requests.id"],
            name=op.f("fk_receipts_request_id_approval_requests"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["org_id"],
            ["organizations.id"],
            name=op.f("fk_receipts_org_id_organizations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("jti", name=op.f("pk_receipts")),
        sa.UniqueConstraint("request_id", name=op.f("uq_receipts_request_id")),
    )
    op.create_index("ix_receipts_kid_expires_at", "receipts", ["kid", "expires_at"])


def downgrade() -> None:
    op.drop_index("ix_receipts_kid_expires_at", table_name="receipts")
    op.drop_table("receipts")
    op.drop_table("signing_keys")
    op.drop_column("webhook_deliveries", "receipt_encrypted")
    for column in (
        "receipt_ttl_seconds",
        "arguments_edited",
        "arguments_hash",
        "arguments_schema",
        "arguments",
    ):
        op.drop_column("approval_requests", column)
