"""The audit chain in a table of its own: audit_chain and audit_unsealed

Revision ID: 0044
Revises: 0043
Create Date: 2026-11-28

Sealing used to write an event's seq, prev_hash and hash into its row in audit_events:
a second write of every (wide) event row and of two index entries. Now the sealer
appends ``audit_chain (org_id, seq, event_id, prev_hash, hash)`` and never writes the
event again. Which events wait for it is ``audit_unsealed (org_id, event_id)``, a row a
trigger adds in the transaction that inserts the event (so every writer, and any event
written with SQL, is covered), and which the sealer deletes as it chains the event.

Sealed events move across unchanged (their seq, prev_hash and hash), unsealed ones are
listed in audit_unsealed; then the three columns and their two indexes are dropped.
Nothing hashed or exported changes. SQLite drops the columns in place (3.35+), not by
recreating the table, which would delete the new rows through their foreign keys.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0044"
down_revision = "0043"
branch_labels = None
depends_on = None

_SQLITE_TRIGGER = """
CREATE TRIGGER audit_events_unsealed AFTER INSERT ON audit_events
BEGIN
    INSERT INTO audit_unsealed (org_id, event_id) VALUES (NEW.org_id, NEW.id);
END
"""
_POSTGRES_FUNCTION = """
CREATE FUNCTION audit_events_unsealed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO audit_unsealed (org_id, event_id) VALUES (NEW.org_id, NEW.id);
    RETURN NULL;
END
$$
"""
_POSTGRES_TRIGGER = """
CREATE TRIGGER audit_events_unsealed AFTER INSERT ON audit_events
FOR EACH ROW EXECUTE FUNCTION audit_events_unsealed()
"""


def _events_fk() -> sa.ForeignKey:
    return sa.ForeignKey("audit_events.id", ondelete="CASCADE")


def upgrade() -> None:
    op.create_table(
        "audit_chain",
        sa.Column("org_id", sa.Uuid(), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False, autoincrement=False),
        sa.Column("event_id", sa.Uuid(), _events_fk(), nullable=False),
        sa.Column("prev_hash", sa.String(64), nullable=False),
        sa.Column("hash", sa.String(64), nullable=False),
        sa.PrimaryKeyConstraint("org_id", "seq"),
        sqlite_with_rowid=False,
    )
    op.create_index("ux_audit_chain_event", "audit_chain", ["event_id"], unique=True)
    op.create_table(
        "audit_unsealed",
        sa.Column("org_id", sa.Uuid(), nullable=False),
        sa.Column("event_id", sa.Uuid(), _events_fk(), nullable=False),
        sa.PrimaryKeyConstraint("org_id", "event_id"),
        sqlite_with_rowid=False,
    )
    op.execute(
        "INSERT INTO audit_chain (org_id, seq, event_id, prev_hash, hash) "
        "SELECT org_id, seq, id, prev_hash, hash FROM audit_events WHERE seq IS NOT NULL"
    )
    op.execute(
        "INSERT INTO audit_unsealed (org_id, event_id) "
        "SELECT org_id, id FROM audit_events WHERE seq IS NULL"
    )
    op.drop_index("ix_audit_events_seq_org", table_name="audit_events")
    op.drop_index("ux_audit_events_org_seq", table_name="audit_events")
    for column in ("hash", "prev_hash", "seq"):
        op.execute(f"ALTER TABLE audit_events DROP COLUMN {column}")
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_POSTGRES_FUNCTION)
        op.execute(_POSTGRES_TRIGGER)
    else:
        op.execute(_SQLITE_TRIGGER)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER audit_events_unsealed ON audit_events")
        op.execute("DROP FUNCTION audit_events_unsealed()")
    else:
        op.execute("DROP TRIGGER audit_events_unsealed")
    op.add_column("audit_events", sa.Column("seq", sa.BigInteger(), nullable=True))
    op.add_column("audit_events", sa.Column("prev_hash", sa.String(64), nullable=True))
    op.add_column("audit_events", sa.Column("hash", sa.String(64), nullable=True))
    op.execute(
        "UPDATE audit_events SET seq = link.seq, prev_hash = link.prev_hash, hash = link.hash "
        "FROM audit_chain AS link WHERE link.event_id = audit_events.id"
    )
    op.create_index("ux_audit_events_org_seq", "audit_events", ["org_id", "seq"], unique=True)
    op.create_index("ix_audit_events_seq_org", "audit_events", ["seq", "org_id"])
    op.drop_table("audit_unsealed")
    op.drop_index("ux_audit_chain_event", table_name="audit_chain")
    op.drop_table("audit_chain")
