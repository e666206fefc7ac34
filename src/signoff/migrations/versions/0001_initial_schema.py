"""initial schema

Revision ID: 0001
Revises:
Create Date: 2026-11-23

Full-text search is set up per dialect at the end: an FTS5 table kept in step by
triggers on SQLite, a generated tsvector column with a GIN index on PostgreSQL.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

import signoff.models.base

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "organizations",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("emergency_stop", sa.Boolean(), nullable=False),
        sa.Column("created_at", signoff.models.base.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_organizations")),
    )
    op.create_table(
        "users",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("org_id", sa.Uuid(), nullable=False),
        sa.Column("email", sa.String(length=320), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("role", sa.String(length=20), nullable=False),
        sa.Column("password_hash", sa.String(length=200), nullable=True),
        sa.Column("created_at", signoff.models.base.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["org_id"],
            ["organizations.id"],
            name=op.f("fk_users_org_id_organizations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_users")),
        sa.UniqueConstraint("org_id", "email", name=op.f("uq_users_org_id_email")),
    )
    op.create_table(
        "connections",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("org_id", sa.Uuid(), nullable=False),
        sa.Column("owner_id", sa.Uuid(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("rate_limit_per_hour", sa.Integer(), nullable=False),
        sa.Column("api_key_hash", sa.String(length=64), nullable=False),
        sa.Column("api_key_prefix", sa.String(length=16), nullable=False),
        sa.Column("webhook_secret_encrypted", sa.Text(), nullable=False),
        sa.Column("previous_webhook_secret_encrypted", sa.Text(), nullable=True),
        sa.Column(
            "previous_webhook_secret_expires_at",
            signoff.models.base.UTCDateTime(timezone=True),
            nullable=True,
        ),
        sa.Column("created_at", signoff.models.base.UTCDateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", signoff.models.base.UTCDateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["org_id"],
            ["organizations.id"],
            name=op.f("fk_connections_org_id_organizations"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["owner_id"], ["users.id"], name=op.f("fk_connections_owner_id_users")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_connections")),
        sa.UniqueConstraint("api_key_hash", name=op.f("uq_connections_api_key_hash")),
    )
    with op.batch_alter_table("connections", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_connections_org_id_created_at"), ["org_id", "created_at"], unique=False
        )

    op.create_table(
        "approval_requests",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("org_id", sa.Uuid(), nullable=False),
        sa.Column("connection_id", sa.Uuid(), nullable=False),
        sa.Column("title", sa.Text(), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("priority", sa.String(length=16), nullable=False),
        sa.Column("action_type", sa.String(length=100), nullable=True),
        sa.Column("source", sa.String(length=100), nullable=True),
        sa.Column(
            "metadata",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("callback_url", sa.Text(), nullable=True),
        sa.Column("callback_headers_encrypted", sa.Text(), nullable=True),
        sa.Column("required_approvals", sa.Integer(), nullable=False),
        sa.Column("current_approvals", sa.Integer(), nullable=False),
        sa.Column("is_sequential", sa.Boolean(), nullable=False),
        sa.Column("idempotency_key", sa.String(length=255), nullable=True),
        sa.Column("expires_at", signoff.models.base.UTCDateTime(timezone=True), nullable=True),
        sa.Column("created_at", signoff.models.base.UTCDateTime(timezone=True), nullable=False),
        sa.Column("updated_at", signoff.models.base.UTCDateTime(timezone=True), nullable=False),
        sa.Column("decided_at", signoff.models.base.UTCDateTime(timezone=True), nullable=True),
        sa.Column("decided_by", sa.Uuid(), nullable=True),
        sa.Column("decided_by_name", sa.String(length=200), nullable=True),
        sa.Column("decision_comment", sa.Text(), nullable=True),
        sa.Column("cancelled_at", signoff.models.base.UTCDateTime(timezone=True), nullable=True),
        sa.Column("comments_count", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["connection_id"],
            ["connections.id"],
            name=op.f("fk_approval_requests_connection_id_connections"),
        ),
        sa.ForeignKeyConstraint(
            ["decided_by"], ["users.id"], name=op.f("fk_approval_requests_decided_by_users")
        ),
        sa.ForeignKeyConstraint(
            ["org_id"],
            ["organizations.id"],
            name=op.f("fk_approval_requests_org_id_organizations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_approval_requests")),
        sa.UniqueConstraint(
            "org_id", "idempotency_key", name=op.f("uq_approval_requests_org_id_idempotency_key")
        ),
    )
    with op.batch_alter_table("approval_requests", schema=None) as batch_op:
        batch_op.create_index(
            "ix_approval_requests_org_action_type_created",
            ["org_id", "action_type", "created_at"],
            unique=False,
        )
        batch_op.create_index(
            "ix_approval_requests_org_created", ["org_id", "created_at", "id"], unique=False
        )
        batch_op.create_index(
            "ix_approval_requests_org_decided", ["org_id", "decided_at"], unique=False
        )
        batch_op.create_index(
            "ix_approval_requests_org_priority_created",
            ["org_id", "priority", "created_at"],
            unique=False,
        )
        batch_op.create_index(
            "ix_approval_requests_org_source_created",
            ["org_id", "source", "created_at"],
            unique=False,
        )
        batch_op.create_index(
            "ix_approval_requests_org_status_created",
            ["org_id", "status", "created_at"],
            unique=False,
        )
        batch_op.create_index(
            "ix_approval_requests_pending_expiry",
            ["expires_at"],
            unique=False,
            sqlite_where=sa.text("status = 'pending' AND expires_at IS NOT NULL"),
            postgresql_where=sa.text("status = 'pending' AND expires_at IS NOT NULL"),
        )

    op.create_table(
        "audit_events",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("org_id", sa.Uuid(), nullable=False),
        sa.Column("request_id", sa.Uuid(), nullable=False),
        sa.Column("type", sa.String(length=64), nullable=False),
        sa.Column("actor_id", sa.Uuid(), nullable=True),
        sa.Column(
            "data",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("created_at", signoff.models.base.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["org_id"],
            ["organizations.id"],
            name=op.f("fk_audit_events_org_id_organizations"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["request_id"],
            ["approval_requests.id"],
            name=op.f("fk_audit_events_request_id_approval_requests"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_audit_events")),
    )
    with op.batch_alter_table("audit_events", schema=None) as batch_op:
        batch_op.create_index(
            "ix_audit_events_request_created", ["request_id", "created_at"], unique=False
        )

    op.create_table(
        "comments",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("org_id", sa.Uuid(), nullable=False),
        sa.Column("request_id", sa.Uuid(), nullable=False),
        sa.Column("user_id", sa.Uuid(), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("created_at", signoff.models.base.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["org_id"],
            ["organizations.id"],
            name=op.f("fk_comments_org_id_organizations"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["request_id"],
            ["approval_requests.id"],
            name=op.f("fk_comments_request_id_approval_requests"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], name=op.f("fk_comments_user_id_users")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_comments")),
    )
    with op.batch_alter_table("comments", schema=None) as batch_op:
        batch_op.create_index(
            "ix_comments_request_created", ["request_id", "created_at"], unique=False
        )

    op.create_table(
        "votes",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("request_id", sa.Uuid(), nullable=False),
        sa.Column("step_id", sa.Uuid(), nullable=True),
        sa.Column("user_id", sa.Uuid(), nullable=False),
        sa.Column("decision", sa.String(length=16), nullable=False),
        sa.Column("comment", sa.Text(), nullable=True),
        sa.Column("created_at", signoff.models.base.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["request_id"],
            ["approval_requests.id"],
            name=op.f("fk_votes_request_id_approval_requests"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], name=op.f("fk_votes_user_id_users")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_votes")),
    )
    with op.batch_alter_table("votes", schema=None) as batch_op:
        batch_op.create_index(
            "ix_votes_request_created", ["request_id", "created_at"], unique=False
        )
        batch_op.create_index(
            "uq_votes_request_user_count_based",
            ["request_id", "user_id"],
            unique=True,
            sqlite_where=sa.text("step_id IS NULL"),
            postgresql_where=sa.text("step_id IS NULL"),
        )
    _create_search_index()


SQLITE_SEARCH = [
    # Self-contained FTS5 table keyed by request id: an external-content table would key on
    # the implicit rowid, which VACUUM may renumber for a table with a UUID primary key.
    "CREATE VIRTUAL TABLE approval_requests_fts USING fts5("
    "title, description, request_id UNINDEXED, tokenize = 'unicode61 remove_diacritics 2')",
    "CREATE TRIGGER approval_requests_fts_insert AFTER INSERT ON approval_requests BEGIN "
    "INSERT INTO approval_requests_fts (title, description, request_id) "
    "VALUES (NEW.title, NEW.description, NEW.id); END",
    # Titles and descriptions never change after creation; rows go only with their org.
    "CREATE TRIGGER approval_requests_fts_delete AFTER DELETE ON approval_requests BEGIN "
    "DELETE FROM approval_requests_fts WHERE request_id = OLD.id; END",
]

# PostgreSQL's parser keeps host names, dotted labels, versions and e-mails whole
# ("api.example.com" is one lexeme) while the query side (and SQLite's tokenizer) splits
# them into words; indexing the alphanumeric runs makes both engines find the same words.
# (\\: keeps SQLAlchemy from reading the character class as a bind parameter.)
_WORDS = "regexp_replace(coalesce({column}, ''), '[^[\\:alnum\\:]]+', ' ', 'g')"
POSTGRES_SEARCH = [
    "ALTER TABLE approval_requests ADD COLUMN search_vector tsvector GENERATED ALWAYS AS ("
    f"setweight(to_tsvector('simple', {_WORDS.format(column='title')}), 'A') || "
    f"setweight(to_tsvector('simple', {_WORDS.format(column='description')}), 'B')) STORED",
    "CREATE INDEX ix_approval_requests_search ON approval_requests USING GIN (search_vector)",
]


def _create_search_index() -> None:
    dialect = op.get_bind().dialect.name
    for statement in SQLITE_SEARCH if dialect == "sqlite" else POSTGRES_SEARCH:
        op.execute(statement)


def _drop_search_index() -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.execute("DROP TRIGGER IF EXISTS approval_requests_fts_delete")
        op.execute("DROP TRIGGER IF EXISTS approval_requests_fts_insert")
        op.execute("DROP TABLE IF EXISTS approval_requests_fts")
    else:
        op.execute("DROP INDEX IF EXISTS ix_approval_requests_search")
        op.execute("ALTER TABLE approval_requests DROP COLUMN IF EXISTS search_vector")


def downgrade() -> None:
    _drop_search_index()
    with op.batch_alter_table("votes", schema=None) as batch_op:
        batch_op.drop_index(
            "uq_votes_request_user_count_based",
            sqlite_where=sa.text("step_id IS NULL"),
            postgresql_where=sa.text("step_id IS NULL"),
        )
        batch_op.drop_index("ix_votes_request_created")

    op.drop_table("votes")
    with op.batch_alter_table("comments", schema=None) as batch_op:
        batch_op.drop_index("ix_comments_request_created")

    op.drop_table("comments")
    with op.batch_alter_table("audit_events", schema=None) as batch_op:
        batch_op.drop_index("ix_audit_events_request_created")

    op.drop_table("audit_events")
    with op.batch_alter_table("approval_requests", schema=None) as batch_op:
        batch_op.drop_index(
            "ix_approval_requests_pending_expiry",
            sqlite_where=sa.text("status = 'pending' AND expires_at IS NOT NULL"),
            postgresql_where=sa.text("status = 'pending' AND expires_at IS NOT NULL"),
        )
        batch_op.drop_index("ix_approval_requests_org_status_created")
        batch_op.drop_index("ix_approval_requests_org_source_created")
        batch_op.drop_index("ix_approval_requests_org_priority_created")
        batch_op.drop_index("ix_approval_requests_org_decided")
        batch_op.drop_index("ix_approval_requests_org_created")
        batch_op.drop_index("ix_approval_requests_org_action_type_created")

    op.drop_table("approval_requests")
    with op.batch_alter_table("connections", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_connections_org_id_created_at"))

    op.drop_table("connections")
    op.drop_table("users")
    op.drop_table("organizations")
