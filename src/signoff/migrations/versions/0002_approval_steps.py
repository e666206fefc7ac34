"""approval steps

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23

Approval chains (decisions.md section 2): named approvers per request, voted once each.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import signoff.models.base

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A literal default lets SQLite add the column in place. An expression default
    # (sa.false()) makes batch mode copy the table, which drops its full-text triggers.
    with op.batch_alter_table("approval_requests", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("has_steps", sa.Boolean(), server_default="0", nullable=False)
        )
    op.create_table(
        "approval_steps",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("request_id", sa.Uuid(), nullable=False),
        sa.Column("step_order", sa.Integer(), nullable=False),
        sa.Column("approver_id", sa.Uuid(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("decided_at", signoff.models.base.UTCDateTime(timezone=True), nullable=True),
        sa.Column("decided_by", sa.Uuid(), nullable=True),
        sa.Column("comment", sa.Text(), nullable=True),
        sa.Column("created_at", signoff.models.base.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["approver_id"], ["users.id"], name=op.f("fk_approval_steps_approver_id_users")
        ),
        sa.ForeignKeyConstraint(
            ["decided_by"], ["users.id"], name=op.f("fk_approval_steps_decided_by_users")
        ),
        sa.ForeignKeyConstraint(
            ["request_id"],
            ["approval_requests.id"],
            name=op.f("fk_approval_steps_request_id_approval_requests"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_approval_steps")),
        sa.UniqueConstraint(
            "request_id", "step_order", name=op.f("uq_approval_steps_request_id_step_order")
        ),
    )
    with op.batch_alter_table("approval_steps", schema=None) as batch_op:
        batch_op.create_index(
            "ix_approval_steps_approver_status", ["approver_id", "status"], unique=False
        )
    with op.batch_alter_table("votes", schema=None) as batch_op:
        batch_op.create_index(
            "uq_votes_step",
            ["step_id"],
            unique=True,
            sqlite_where=sa.text("step_id IS NOT NULL"),
            postgresql_where=sa.text("step_id IS NOT NULL"),
        )


def downgrade() -> None:
    with op.batch_alter_table("votes", schema=None) as batch_op:
        batch_op.drop_index("uq_votes_step")
    with op.batch_alter_table("approval_steps", schema=None) as batch_op:
        batch_op.drop_index("ix_approval_steps_approver_status")
    op.drop_table("approval_steps")
    with op.batch_alter_table("approval_requests", schema=None) as batch_op:
        batch_op.drop_column("has_steps")
    _restore_sqlite_search_triggers()


def _restore_sqlite_search_triggers() -> None:
    """SQLite batch mode drops a table's triggers when it copies the table: put back the
    ones of 0001 that keep the full-text index in step (its rows are keyed by request id,
    so they survive the copy)."""
    if op.get_bind().dialect.name != "sqlite":
        return
    op.execute(
        "CREATE TRIGGER IF NOT EXISTS approval_requests_fts_insert AFTER INSERT ON "
        "approval_requests BEGIN INSERT INTO approval_requests_fts (title, description, "
        "request_id) VALUES (NEW.title, NEW.description, NEW.id); END"
    )
    op.execute(
        "CREATE TRIGGER IF NOT EXISTS approval_requests_fts_delete AFTER DELETE ON "
        "approval_requests BEGIN DELETE FROM approval_requests_fts "
        "WHERE request_id = OLD.id; END"
    )
