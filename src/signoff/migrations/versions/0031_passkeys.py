"""passkeys: registered credentials, one-time challenges, assertions of decisions

Revision ID: 0031
Revises: 0028
Create Date: 2026-11-28

``organizations.passkey_for`` ("off", "critical", "all"): which decisions need the
approver's passkey. ``passkeys``: each user's WebAuthn credentials (id, public key, sign
count, transports). ``passkey_challenges``: challenges handed out, each used once, kept in
the database so that any replica checks them. ``decision_assertions``: the assertion that
signed a vote, kept for export and later verification. The column is added with ``ALTER
TABLE ... ADD COLUMN`` (no table rebuild on SQLite).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import signoff.models.base
from signoff.models.base import JSONType

revision = "0031"
down_revision = "0028"
branch_labels = None
depends_on = None


def _utc(name: str, nullable: bool) -> sa.Column[object]:
    return sa.Column(name, signoff.models.base.UTCDateTime(timezone=True), nullable=nullable)


def upgrade() -> None:
    op.add_column(
        "organizations",
        sa.Column("passkey_for", sa.String(length=10), nullable=False, server_default="off"),
    )
    op.create_table(
        "passkeys",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("org_id", sa.Uuid(), nullable=False),
        sa.Column("user_id", sa.Uuid(), nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("credential_id", sa.String(length=1400), nullable=False),
        sa.Column("public_key", sa.Text(), nullable=False),
        sa.Column("sign_count", sa.Integer(), nullable=False),
        sa.Column("transports", JSONType, nullable=False),
        _utc("created_at", nullable=False),
        _utc("last_used_at", nullable=True),
        sa.ForeignKeyConstraint(
            ["org_id"],
            ["organizations.id"],
            name=op.f("fk_passkeys_org_id_organizations"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_passkeys_user_id_users"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_passkeys")),
        sa.UniqueConstraint("credential_id", name=op.f("uq_passkeys_credential_id")),
    )
    op.create_index("ix_passkeys_user_created", "passkeys", ["user_id", "created_at"])
    op.create_table(
        "passkey_challenges",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("challenge", sa.String(length=100), nullable=False),
        sa.Column("purpose", sa.String(length=10), nullable=False),
        sa.Column("user_id", sa.Uuid(), nullable=True),
        sa.Column("request_id", sa.Uuid(), nullable=True),
        sa.Column("decision", sa.String(length=16), nullable=True),
        sa.Column("arguments_hash", sa.String(length=64), nullable=True),
        sa.Column("nonce", sa.String(length=64), nullable=True),
        _utc("created_at", nullable=False),
        _utc("expires_at", nullable=False),
        sa.ForeignKeyConstraint(
            ["user_id"],
            ["users.id"],
            name=op.f("fk_passkey_challenges_user_id_users"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_passkey_challenges")),
        sa.UniqueConstraint("challenge", name=op.f("uq_passkey_challenges_challenge")),
    )
    op.create_index("ix_passkey_challenges_expires", "passkey_challenges", ["expires_at"])
    op.create_table(
        "decision_assertions",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("org_id", sa.Uuid(), nullable=False),
        sa.Column("request_id", sa.Uuid(), nullable=False),
        sa.Column("step_id", sa.Uuid(), nullable=True),
        sa.Column("user_id", sa.Uuid(), nullable=False),
        sa.Column("decision", sa.String(length=16), nullable=False),
        sa.Column("arguments_hash", sa.String(length=64), nullable=False),
        sa.Column("nonce", sa.String(length=64), nullable=False),
        sa.Column("credential_id", sa.String(length=1400), nullable=False),
        sa.Column("public_key", sa.Text(), nullable=False),
        sa.Column("authenticator_data", sa.Text(), nullable=False),
        sa.Column("client_data_json", sa.Text(), nullable=False),
        sa.Column("signature", sa.Text(), nullable=False),
        sa.Column("rp_id", sa.String(length=253), nullable=False),
        sa.Column("origin", sa.String(length=300), nullable=False),
        _utc("created_at", nullable=False),
        sa.ForeignKeyConstraint(
            ["org_id"],
            ["organizations.id"],
            name=op.f("fk_decision_assertions_org_id_organizations"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["request_id"],
            ["approval_requests.id"],
            name=op.f("fk_decision_assertions_request_id_approval_requests"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_decision_assertions_user_id_users")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_decision_assertions")),
    )
    op.create_index(
        "ix_decision_assertions_request", "decision_assertions", ["request_id", "created_at"]
    )


def downgrade() -> None:
    op.drop_index("ix_decision_assertions_request", table_name="decision_assertions")
    op.drop_table("decision_assertions")
    op.drop_index("ix_passkey_challenges_expires", table_name="passkey_challenges")
    op.drop_table("passkey_challenges")
    op.drop_index("ix_passkeys_user_created", table_name="passkeys")
    op.drop_table("passkeys")
    op.drop_column("organizations", "passkey_for")
