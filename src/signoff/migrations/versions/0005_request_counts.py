"""request counts (SQLite)

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-23

The total of an unfiltered list page, per org, kept by triggers on SQLite. Counting the
org's requests scanned its whole history on every list call, most of a list's time
(docs/decisions/0009-list-pages-index-hints-and-the-1m-row-org.md), where
DESIGN.md asks that list pages never scan it. Triggers keep
the count exact whoever writes (the API, the CLI, a worker) and cost SQLite's single
writer one small upsert per insert. PostgreSQL keeps counting: there one counter row per
org would make the org's concurrent creates wait on each other's row lock.
"""

from __future__ import annotations

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

# Hand-managed like full-text search (migrations/env.py): the models do not describe it.
SQLITE_REQUEST_COUNTS = [
    "CREATE TABLE approval_request_counts ("
    "org_id CHAR(32) NOT NULL PRIMARY KEY, total INTEGER NOT NULL)",
    "CREATE TRIGGER approval_request_counts_insert AFTER INSERT ON approval_requests BEGIN "
    "INSERT INTO approval_request_counts (org_id, total) VALUES (NEW.org_id, 1) "
    "ON CONFLICT (org_id) DO UPDATE SET total = total + 1; END",
    "CREATE TRIGGER approval_request_counts_delete AFTER DELETE ON approval_requests BEGIN "
    "UPDATE approval_request_counts SET total = total - 1 WHERE org_id = OLD.org_id; END",
    "INSERT INTO approval_request_counts (org_id, total) "
    "SELECT org_id, count(*) FROM approval_requests GROUP BY org_id",
]


def upgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        for statement in SQLITE_REQUEST_COUNTS:
            op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.execute("DROP TRIGGER IF EXISTS approval_request_counts_delete")
        op.execute("DROP TRIGGER IF EXISTS approval_request_counts_insert")
        op.execute("DROP TABLE IF EXISTS approval_request_counts")
