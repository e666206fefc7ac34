"""request counts on PostgreSQL too, kept by statement triggers in a few slots per org

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-25

An unfiltered list page's total was counted on PostgreSQL (up to 10,001 of the org's
requests) on every call: most of what a list page cost the database, even read from the
index alone (docs/decisions/0009-list-pages-index-hints-and-the-1m-row-org.md). SQLite has kept
the count with triggers since 0005; PostgreSQL did not, because one counter row per org
would make the org's concurrent creates wait on each other's row lock until they commit.

Here each org's count is spread over up to ``SLOTS`` rows: a statement adds what it
inserted (or takes away what it deleted) to the slot of the server process that runs it
(``pg_backend_pid() % SLOTS``), so two connections' creates rarely touch the same row,
and the org's count is the sum of its slots, read in one short index range. The
triggers are statement triggers with transition tables: a COPY or a batch of deletes
(retention) adds one row change per org, not one per request. Rows of one statement are
applied in the order of their org, so that two statements never wait on each other in
opposite orders. A ``TRUNCATE`` of the requests empties the counts.

Requests never change org, so updates need no trigger. An org's slots stay behind, at
zero, when the org is deleted.
"""

from __future__ import annotations

from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

SLOTS = 16

_ADD = (
    "INSERT INTO approval_request_counts AS counted (org_id, slot, total) "
    "SELECT org_id, pg_backend_pid() % {slots}, {sign}count(*) FROM {rows} "
    "GROUP BY org_id ORDER BY org_id "
    "ON CONFLICT (org_id, slot) DO UPDATE SET total = counted.total + excluded.total"
)


def _function(name: str, body: str) -> str:
    return (
        f"CREATE OR REPLACE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$ "
        f"BEGIN {body}; RETURN NULL; END $$"
    )


POSTGRES_REQUEST_COUNTS = [
    # Fill factor: room on each page for the slots' new versions, so that an update
    # stays on its page (a HOT update) and old versions are pruned there.
    "CREATE TABLE approval_request_counts ("
    "org_id UUID NOT NULL, slot SMALLINT NOT NULL, total BIGINT NOT NULL, "
    "CONSTRAINT pk_approval_request_counts PRIMARY KEY (org_id, slot)"
    ") WITH (fillfactor = 50)",
    _function(
        "signoff_count_requests_inserted",
        _ADD.format(slots=SLOTS, sign="", rows="inserted_requests"),
    ),
    _function(
        "signoff_count_requests_deleted",
        _ADD.format(slots=SLOTS, sign="-", rows="deleted_requests"),
    ),
    _function("signoff_count_requests_truncated", "DELETE FROM approval_request_counts"),
    # Nothing writes a request while the triggers are created and the counts filled in.
    "LOCK TABLE approval_requests IN SHARE MODE",
    "CREATE TRIGGER approval_request_counts_insert AFTER INSERT ON approval_requests "
    "REFERENCING NEW TABLE AS inserted_requests FOR EACH STATEMENT "
    "EXECUTE FUNCTION signoff_count_requests_inserted()",
    "CREATE TRIGGER approval_request_counts_delete AFTER DELETE ON approval_requests "
    "REFERENCING OLD TABLE AS deleted_requests FOR EACH STATEMENT "
    "EXECUTE FUNCTION signoff_count_requests_deleted()",
    "CREATE TRIGGER approval_request_counts_truncate AFTER TRUNCATE ON approval_requests "
    "FOR EACH STATEMENT EXECUTE FUNCTION signoff_count_requests_truncated()",
    "INSERT INTO approval_request_counts (org_id, slot, total) "
    "SELECT org_id, 0, count(*) FROM approval_requests GROUP BY org_id",
]


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for statement in POSTGRES_REQUEST_COUNTS:
            op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for trigger in ("truncate", "delete", "insert"):
            op.execute(
                f"DROP TRIGGER IF EXISTS approval_request_counts_{trigger} ON approval_requests"
            )
        for change in ("truncated", "deleted", "inserted"):
            op.execute(f"DROP FUNCTION IF EXISTS signoff_count_requests_{change}()")
        op.execute("DROP TABLE IF EXISTS approval_request_counts")
