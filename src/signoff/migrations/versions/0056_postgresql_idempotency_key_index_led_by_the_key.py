"""PostgreSQL: the idempotency key's unique index leads with the key

Revision ID: 0056
Revises: 0055
Create Date: 2026-11-29

A keyed create looks its key up in the org. The unique constraint on
``(org_id, idempotency_key)`` led with org_id, as does ``(org_id, number)``: a generic
plan made before the table's first ANALYZE could take the latter and read every request
of the org per create. The unique index on ``(idempotency_key, org_id)`` holds the same
pairs apart (NULL keys distinct) and still arbitrates ``ON CONFLICT (org_id,
idempotency_key)``; the lookup compares the org with ``IS NOT DISTINCT FROM``, which no
index applies, so the key's index is the only one it can use
(docs/decisions/0047-postgresql-create-key-lookup-plan.md).

SQLite keeps its constraint. The index is built while the table is locked, which takes a
while on a large table.
"""

from __future__ import annotations

from alembic import op

revision = "0056"
down_revision = "0055"
branch_labels = None
depends_on = None

_TABLE = "approval_requests"
_CONSTRAINT = "uq_approval_requests_org_id_idempotency_key"
_INDEX = "uq_approval_requests_idempotency_key_org_id"


def _on_postgresql() -> bool:
    return op.get_bind().dialect.name == "postgresql"


def upgrade() -> None:
    if _on_postgresql():
        op.create_index(_INDEX, _TABLE, ["idempotency_key", "org_id"], unique=True)
        op.drop_constraint(_CONSTRAINT, _TABLE, type_="unique")


def downgrade() -> None:
    if _on_postgresql():
        op.create_unique_constraint(_CONSTRAINT, _TABLE, ["org_id", "idempotency_key"])
        op.drop_index(_INDEX, table_name=_TABLE)
