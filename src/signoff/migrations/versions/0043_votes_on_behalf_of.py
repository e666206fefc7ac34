"""votes on behalf of: a delegate's vote on a group step counts for the away member

Revision ID: 0043
Revises: 0042
Create Date: 2026-11-28

``votes`` gains ``on_behalf_of``: the away member of a group step's group whose vote a
delegate cast ("Bob for Ann"); null for one's own vote. A member counts once per step,
whoever cast the vote: a unique index on ``step_id, coalesce(on_behalf_of, user_id)``
beside the one on ``step_id, user_id`` (a person casts one vote per step).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0043"
down_revision = "0042"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("votes", schema=None) as batch_op:
        batch_op.add_column(sa.Column("on_behalf_of", sa.Uuid(), nullable=True))
        batch_op.create_foreign_key(
            op.f("fk_votes_on_behalf_of_users"), "users", ["on_behalf_of"], ["id"]
        )
    op.create_index(
        "uq_votes_step_counted",
        "votes",
        ["step_id", sa.func.coalesce(sa.column("on_behalf_of"), sa.column("user_id"))],
        unique=True,
        sqlite_where=sa.text("step_id IS NOT NULL"),
        postgresql_where=sa.text("step_id IS NOT NULL"),
    )


def downgrade() -> None:
    # A vote cast for someone else cannot be told apart in the old schema: it goes.
    op.execute("DELETE FROM votes WHERE on_behalf_of IS NOT NULL")
    op.drop_index("uq_votes_step_counted", table_name="votes")
    with op.batch_alter_table("votes", schema=None) as batch_op:
        batch_op.drop_constraint(op.f("fk_votes_on_behalf_of_users"), type_="foreignkey")
        batch_op.drop_column("on_behalf_of")
