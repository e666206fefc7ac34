"""oauth

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23

OAuth 2.0 with PKCE (interface.md section 5, decisions.md section 11): clients per
connection, single-use authorization codes, access and refresh tokens (hashed, in
families for rotation and replay detection), and the sign-in sessions of the consent page.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

import signoff.models.base

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def _utc(name: str, nullable: bool) -> sa.Column[object]:
    return sa.Column(name, signoff.models.base.UTCDateTime(timezone=True), nullable=nullable)


def upgrade() -> None:
    op.create_table(
        "oauth_clients",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("client_id", sa.String(length=64), nullable=False),
        sa.Column("org_id", sa.Uuid(), nullable=False),
        sa.Column("connection_id", sa.Uuid(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column(
            "redirect_uris",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("is_public", sa.Boolean(), nullable=False),
        sa.Column("secret_hash", sa.String(length=64), nullable=True),
        sa.Column("secret_prefix", sa.String(length=16), nullable=True),
        _utc("created_at", nullable=False),
        _utc("deleted_at", nullable=True),
        sa.ForeignKeyConstraint(
            ["connection_id"],
            ["connections.id"],
            name=op.f("fk_oauth_clients_connection_id_connections"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["org_id"],
            ["organizations.id"],
            name=op.f("fk_oauth_clients_org_id_organizations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_oauth_clients")),
        sa.UniqueConstraint("client_id", name=op.f("uq_oauth_clients_client_id")),
    )
    with op.batch_alter_table("oauth_clients", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_oauth_clients_connection_id_created_at"),
            ["connection_id", "created_at"],
            unique=False,
        )

    op.create_table(
        "oauth_authorization_codes",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("code_hash", sa.String(length=64), nullable=False),
        sa.Column("client_pk", sa.Uuid(), nullable=False),
        sa.Column("user_id", sa.Uuid(), nullable=False),
        sa.Column("redirect_uri", sa.Text(), nullable=False),
        sa.Column("redirect_uri_explicit", sa.Boolean(), nullable=False),
        sa.Column("scope", sa.String(length=200), nullable=False),
        sa.Column("code_challenge", sa.String(length=128), nullable=True),
        _utc("created_at", nullable=False),
        _utc("expires_at", nullable=False),
        _utc("used_at", nullable=True),
        sa.ForeignKeyConstraint(
            ["client_pk"],
            ["oauth_clients.id"],
            name=op.f("fk_oauth_authorization_codes_client_pk_oauth_clients"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["user_id"],
            ["users.id"],
            name=op.f("fk_oauth_authorization_codes_user_id_users"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_oauth_authorization_codes")),
        sa.UniqueConstraint("code_hash", name=op.f("uq_oauth_authorization_codes_code_hash")),
    )

    op.create_table(
        "oauth_tokens",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=10), nullable=False),
        sa.Column("client_pk", sa.Uuid(), nullable=False),
        sa.Column("user_id", sa.Uuid(), nullable=False),
        sa.Column("scope", sa.String(length=200), nullable=False),
        sa.Column("family_id", sa.Uuid(), nullable=False),
        sa.Column("parent_id", sa.Uuid(), nullable=True),
        _utc("created_at", nullable=False),
        _utc("expires_at", nullable=False),
        _utc("revoked_at", nullable=True),
        _utc("rotated_at", nullable=True),
        sa.ForeignKeyConstraint(
            ["client_pk"],
            ["oauth_clients.id"],
            name=op.f("fk_oauth_tokens_client_pk_oauth_clients"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["user_id"],
            ["users.id"],
            name=op.f("fk_oauth_tokens_user_id_users"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_oauth_tokens")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_oauth_tokens_token_hash")),
    )
    with op.batch_alter_table("oauth_tokens", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_oauth_tokens_family_id"), ["family_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_oauth_tokens_client_pk"), ["client_pk"], unique=False)

    op.create_table(
        "dashboard_sessions",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("user_id", sa.Uuid(), nullable=True),
        sa.Column("csrf_token", sa.String(length=64), nullable=False),
        _utc("created_at", nullable=False),
        _utc("expires_at", nullable=False),
        sa.ForeignKeyConstraint(
            ["user_id"],
            ["users.id"],
            name=op.f("fk_dashboard_sessions_user_id_users"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_dashboard_sessions")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_dashboard_sessions_token_hash")),
    )
    with op.batch_alter_table("dashboard_sessions", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_dashboard_sessions_expires_at"), ["expires_at"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("dashboard_sessions", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_dashboard_sessions_expires_at"))
    op.drop_table("dashboard_sessions")
    with op.batch_alter_table("oauth_tokens", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_oauth_tokens_client_pk"))
        batch_op.drop_index(batch_op.f("ix_oauth_tokens_family_id"))
    op.drop_table("oauth_tokens")
    op.drop_table("oauth_authorization_codes")
    with op.batch_alter_table("oauth_clients", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_oauth_clients_connection_id_created_at"))
    op.drop_table("oauth_clients")
