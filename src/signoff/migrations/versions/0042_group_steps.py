"""group steps: a chain step may name a group and a quorum of its members

Revision ID: 0042
Revises: 0039
Create Date: 2026-11-28

``approval_steps`` gains ``group_id`` (with an index on ``group_id, status`` for the
members' inbox), ``required_approvals`` and ``current_approvals``; ``approver_id``
becomes nullable (a group step names no person). A group step is voted once by each
member, so the unique index on votes moves from ``step_id`` to ``step_id, user_id``.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0042"
down_revision = "0039"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("approval_steps", schema=None) as batch_op:
        batch_op.add_column(sa.Column("group_id", sa.Uuid(), nullable=True))
        batch_op.add_column(
            sa.Column("required_approvals", sa.Integer(), server_default="1", nullable=False)
        )
        batch_op.add_column(
            sa.Column("current_approvals", sa.Integer(), server_default="0", nullable=False)
        )
        batch_op.alter_column("approver_id", existing_type=sa.Uuid(), nullable=True)
        batch_op.create_foreign_key(
            op.f("fk_approval_steps_group_id_groups"),
            "groups",
            ["group_id"],
            ["id"],
            ondelete="SET NULL",
        )
        batch_op.create_index(
            "ix_approval_steps_group_status", ["group_id", "status"], unique=False
        )
    with op.batch_alter_table("votes", schema=None) as batch_op:
        batch_op.drop_index("uq_votes_step")
        batch_op.create_index(
            "uq_votes_step_user",
            ["step_id", "user_id"],
            unique=True,
            sqlite_where=sa.text("step_id IS NOT NULL"),
            postgresql_where=sa.text("step_id IS NOT NULL"),
        )


def downgrade() -> None:
    # Group steps cannot be written in the old schema: they go, with their votes.
    op.execute(
        "DELETE FROM votes WHERE step_id IN "
        "(SELECT id FROM approval_steps WHERE approver_id IS NULL)"
    )
    op.execute("DELETE FROM approval_steps WHERE approver_id IS NULL")
    with op.batch_alter_table("votes", schema=None) as batch_op:
        batch_op.drop_index("uq_votes_step_user")
        batch_op.create_index(
            "uq_votes_step",
            ["step_id"],
            unique=True,
            sqlite_where=sa.text("step_id IS NOT NULL"),
            postgresql_where=sa.text("step_id IS NOT NULL"),
        )
    with op.batch_alter_table("approval_steps", schema=None) as batch_op:
        batch_op.drop_index("ix_approval_steps_group_status")
        batch_op.drop_constraint(op.f("fk_approval_steps_group_id_groups"), type_="foreignkey")
        batch_op.alter_column("approver_id", existing_type=sa.Uuid(), nullable=False)
        batch_op.drop_column("current_approvals")
        batch_op.drop_column("required_approvals")
        batch_op.drop_column("group_id")
