"""signoff_lost_race(): how a decision made without a lock gives up (PostgreSQL)

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-25

On PostgreSQL a decision reads its request without a lock and sends every write it
makes as one statement that is its own transaction (``storage.prepared.writes_alone``):
the request's compare-and-set names the row version it read. Should another writer have
changed the request since, the compare-and-set changes no row, and the statement must
then write nothing at all: it calls this function, which raises a serialization failure
(SQLSTATE 40001), so PostgreSQL rolls the whole statement back; the decision reads the
request again and retries (docs/architecture.md, *Decisions without a lock*).

SQLite needs nothing: its writers hold the database.
"""

from __future__ import annotations

from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(
        """
        CREATE OR REPLACE FUNCTION signoff_lost_race() RETURNS boolean
        LANGUAGE plpgsql VOLATILE AS $$
        BEGIN
            RAISE EXCEPTION USING
                ERRCODE = 'serialization_failure',
                MESSAGE = 'signoff: the request changed since it was read';
        END
        $$
        """
    )


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("DROP FUNCTION IF EXISTS signoff_lost_race()")
