"""organization names unique ignoring case; one setup link, the newest

Revision ID: 0022
Revises: 0021
Create Date: 2026-11-27

``uq_organizations_name_lower``: a unique index on ``lower(name)``, so ``--org NAME``
always names one organization. Existing duplicates are kept, not merged: the oldest
organization of each name keeps it, and every later copy is renamed with a suffix
("Acme (2)", "Acme (3)", ...), each rename printed on stderr with the org's id. Nothing
else of the renamed organizations changes (their users, connections and keys stay).

``setup_link`` replaces ``setup_tokens``: one row holding the hash of the newest
first-run link only, so a start invalidates every earlier start's link, and every use of
a link updates that one row, so two submissions (of any replicas) cannot both succeed.
An unused link of a database without an organization is carried over, so it still works.
"""

from __future__ import annotations

import sys
import uuid

import sqlalchemy as sa
from alembic import op

import signoff.models.base

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None

NAME_INDEX = "uq_organizations_name_lower"
NAME_LENGTH = 200


def _utc(name: str, nullable: bool) -> sa.Column[object]:
    return sa.Column(name, signoff.models.base.UTCDateTime(timezone=True), nullable=nullable)


def upgrade() -> None:
    _rename_duplicate_org_names(op.get_bind())
    op.create_index(NAME_INDEX, "organizations", [sa.text("lower(name)")], unique=True)
    op.create_table(
        "setup_link",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=True),
        _utc("issued_at", nullable=False),
        _utc("used_at", nullable=True),
        sa.CheckConstraint("id = 1", name=op.f("ck_setup_link_single_row")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_setup_link")),
    )
    op.execute(
        "INSERT INTO setup_link (id, token_hash, issued_at) "
        "SELECT 1, token_hash, created_at FROM setup_tokens "
        "WHERE used_at IS NULL AND NOT EXISTS (SELECT 1 FROM organizations) "
        "ORDER BY created_at DESC LIMIT 1"
    )
    op.drop_table("setup_tokens")


def _rename_duplicate_org_names(bind: sa.Connection) -> None:
    """The oldest org of each name (ignoring case, as the index compares) keeps it;
    later copies get the first free suffix. ``lower`` is the database's own, so the
    renamed names are unique by the index's rule on either database."""
    rows = bind.execute(
        sa.text("SELECT id, name, lower(name) FROM organizations ORDER BY created_at, id")
    ).all()
    taken = {key for _, _, key in rows}
    kept: set[str] = set()
    for org_id, name, key in rows:
        if key not in kept:
            kept.add(key)
            continue
        number = 2
        while True:
            suffix = f" ({number})"
            candidate = name[: NAME_LENGTH - len(suffix)] + suffix
            candidate_key = bind.execute(
                sa.select(sa.func.lower(sa.literal(candidate, sa.String())))
            ).scalar_one()
            if candidate_key not in taken:
                break
            number += 1
        bind.execute(
            sa.text("UPDATE organizations SET name = :name WHERE id = :id"),
            {"name": candidate, "id": org_id},
        )
        taken.add(candidate_key)
        kept.add(candidate_key)
        sys.stderr.write(
            f"organization {org_id}: renamed {name!r} to {candidate!r} "
            "(organization names are now unique, ignoring case)\n"
        )


def downgrade() -> None:
    op.create_table(
        "setup_tokens",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        _utc("created_at", nullable=False),
        _utc("used_at", nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_setup_tokens")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_setup_tokens_token_hash")),
    )
    op.get_bind().execute(
        sa.text(
            "INSERT INTO setup_tokens (id, token_hash, created_at) "
            "SELECT :id, token_hash, issued_at FROM setup_link WHERE token_hash IS NOT NULL"
        ).bindparams(sa.bindparam("id", uuid.uuid4(), type_=sa.Uuid()))
    )
    op.drop_table("setup_link")
    op.drop_index(NAME_INDEX, table_name="organizations")
