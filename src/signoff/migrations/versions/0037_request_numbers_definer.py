"""PostgreSQL request numbers work for a role that may only read and write rows

Revision ID: 0037
Revises: 0036
Create Date: 2026-11-28

``signoff_next_request_number`` creates an org's sequence on its first request, and the
organizations' delete and truncate triggers drop sequences: both need the CREATE
privilege on the schema (and ownership of the sequences), which an application role
granted only SELECT, INSERT, UPDATE and DELETE does not have. The three functions now run
as their owner, the role that ran the migrations (``SECURITY DEFINER``), with the search
path pinned to the schema they were created in so that a caller's search path cannot
redirect them. SQLite numbers requests with a trigger and has no privileges: nothing to do.
"""

from __future__ import annotations

from alembic import op

revision = "0037"
down_revision = "0036"
branch_labels = None
depends_on = None

FUNCTIONS = (
    "signoff_next_request_number(uuid)",
    "signoff_drop_request_numbers()",
    "signoff_drop_all_request_numbers()",
)


def _alter_each(clause: str) -> None:
    for function in FUNCTIONS:
        op.execute(
            "DO $$ BEGIN EXECUTE format("
            f"'ALTER FUNCTION %I.{function} {clause}', current_schema(), current_schema()"
            "); END $$"
        )


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    _alter_each("SECURITY DEFINER SET search_path = %I, pg_temp")


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    _alter_each("SECURITY INVOKER RESET search_path")
