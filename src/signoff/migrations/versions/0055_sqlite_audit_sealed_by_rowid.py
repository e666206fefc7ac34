"""SQLite: the sealer finds waiting events by their rowid past a mark, not by a trigger

Revision ID: 0055
Revises: 0054
Create Date: 2026-11-29

The ``audit_events_unsealed`` trigger (0044) wrote a row of ``audit_unsealed`` for every
event, in the event's own transaction, under SQLite's write lock; the sealer then read
that list sorted and deleted from it. Under SQLite's one writer an event's rowid is its
commit order, so the sealer now chains the events past ``audit_seal_mark`` (one row: the
rowid of the last event chained and that event's id) in rowid order and moves the mark
in the same transaction (audit/repository.py). The mark is set at the last event written
before this upgrade; events still listed in ``audit_unsealed`` are chained first, in
their old order, then the list stays empty.

The downgrade lists every event that has no link in ``audit_chain`` again and puts the
trigger back. PostgreSQL keeps its trigger: nothing changes there
(docs/decisions/0049-sqlite-audit-sealed-in-commit-order.md).
"""

from __future__ import annotations

from alembic import op

revision = "0055"
down_revision = "0054"
branch_labels = None
depends_on = None

_TRIGGER = """
CREATE TRIGGER audit_events_unsealed AFTER INSERT ON audit_events
BEGIN
    INSERT INTO audit_unsealed (org_id, event_id) VALUES (NEW.org_id, NEW.id);
END
"""


def _sqlite() -> bool:
    return bool(op.get_bind().dialect.name == "sqlite")


def upgrade() -> None:
    if not _sqlite():
        return
    op.execute("DROP TRIGGER audit_events_unsealed")
    op.execute(
        "CREATE TABLE audit_seal_mark ("
        "id INTEGER PRIMARY KEY CHECK (id = 1), "
        "event_rowid INTEGER NOT NULL, "
        "event_id CHAR(32))"
    )
    op.execute("INSERT INTO audit_seal_mark (id, event_rowid, event_id) VALUES (1, 0, NULL)")
    op.execute(
        "UPDATE audit_seal_mark SET (event_rowid, event_id) = "
        "(SELECT rowid, id FROM audit_events ORDER BY rowid DESC LIMIT 1) "
        "WHERE EXISTS (SELECT 1 FROM audit_events)"
    )


def downgrade() -> None:
    if not _sqlite():
        return
    op.execute(
        "INSERT INTO audit_unsealed (org_id, event_id) "
        "SELECT e.org_id, e.id FROM audit_events AS e "
        "WHERE NOT EXISTS (SELECT 1 FROM audit_chain AS c WHERE c.event_id = e.id) "
        "AND NOT EXISTS (SELECT 1 FROM audit_unsealed AS u WHERE u.event_id = e.id)"
    )
    op.execute("DROP TABLE audit_seal_mark")
    op.execute(_TRIGGER)
