"""approval_requests.number: each request's number in its org (#1234)

Revision ID: 0024
Revises: 0023
Create Date: 2026-11-27

People name a request by a short number; the first digits of its UUIDv7 are its time,
which every request of the same minute shares. Existing requests are numbered 1, 2, ...
per org in the order they were created; the unique (org_id, number) index keeps the
numbers of an org apart.

Where the next number comes from:

- SQLite: the org's row of request counts (0005) also keeps the last number given
  (``issued``), raised by the same insert trigger; a create reads it inside its write
  transaction, which no other writer shares (``BEGIN IMMEDIATE``), and takes the next.
- PostgreSQL: one sequence per org, ``signoff_request_number_<org id in hex>``, drawn by
  the create's own statement (``signoff_next_request_number``). A counter row would be
  locked by each create until it commits, so the org's concurrent creates would wait on
  one another (the reason 0018 spreads the counts over slots); a sequence is not
  locked. The function makes an org's sequence on its first use, starting after the
  numbers its requests hold; deleting an org (or truncating the orgs) drops it.

Numbers are never reused, not even after a retention purge. They may skip one: on
PostgreSQL where a create drew a number and then failed or lost a race of two creates
with one idempotency key, or after a crash (a sequence logs ahead).

The column is added with ``ALTER TABLE ... ADD COLUMN`` on both databases rather than
SQLite's batch mode, which would rebuild the table and drop the search index's triggers;
on SQLite it keeps the default 0 that adding a NOT NULL column there requires.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None

INDEX = "uq_approval_requests_org_number"
SEQUENCE_PREFIX = "signoff_request_number_"

# Creation order per org: created_at, then id (UUIDv7: time-ordered too).
_BACKFILL = (
    "UPDATE approval_requests SET number = numbered.n FROM ("
    "SELECT id, row_number() OVER (PARTITION BY org_id ORDER BY created_at, id) AS n "
    "FROM approval_requests) AS numbered WHERE approval_requests.id = numbered.id"
)

# The request counts' insert trigger of 0005, and the same keeping the last number.
_SQLITE_COUNT_TRIGGER_0005 = (
    "CREATE TRIGGER approval_request_counts_insert AFTER INSERT ON approval_requests BEGIN "
    "INSERT INTO approval_request_counts (org_id, total) VALUES (NEW.org_id, 1) "
    "ON CONFLICT (org_id) DO UPDATE SET total = total + 1; END"
)
_SQLITE_COUNT_TRIGGER = (
    "CREATE TRIGGER approval_request_counts_insert AFTER INSERT ON approval_requests BEGIN "
    "INSERT INTO approval_request_counts (org_id, total, issued) "
    "VALUES (NEW.org_id, 1, NEW.number) "
    "ON CONFLICT (org_id) DO UPDATE SET total = total + 1, issued = max(issued, NEW.number); "
    "END"
)
SQLITE_UPGRADE = [
    "ALTER TABLE approval_request_counts ADD COLUMN issued INTEGER NOT NULL DEFAULT 0",
    "UPDATE approval_request_counts SET issued = coalesce(("
    "SELECT max(number) FROM approval_requests "
    "WHERE approval_requests.org_id = approval_request_counts.org_id), 0)",
    "DROP TRIGGER approval_request_counts_insert",
    _SQLITE_COUNT_TRIGGER,
]
SQLITE_DOWNGRADE = [
    "DROP TRIGGER approval_request_counts_insert",
    _SQLITE_COUNT_TRIGGER_0005,
    "ALTER TABLE approval_request_counts DROP COLUMN issued",
]

# Every org's sequence, in the schema the functions see (built of constants only).
_DROP_ALL_SEQUENCES = (
    "DECLARE numbers regclass; BEGIN "
    "  FOR numbers IN SELECT c.oid::regclass FROM pg_class AS c "
    "    WHERE c.relkind = 'S' AND c.relname LIKE 'signoff\\_request\\_number\\_%' "
    "      AND pg_table_is_visible(c.oid) "
    "  LOOP EXECUTE format('DROP SEQUENCE %s', numbers); END LOOP; "
    "END;"
)

# The exception block (a subtransaction) is entered only when the org has no sequence
# yet: two first creates of an org at once both try to make it, the second waits for the
# first to commit, fails on the name taken, and draws from the first one's sequence.
POSTGRES_UPGRADE = [
    "CREATE FUNCTION signoff_next_request_number(org uuid) RETURNS integer "
    "LANGUAGE plpgsql VOLATILE AS $$ "
    "DECLARE "
    f"  sequence_name text := '{SEQUENCE_PREFIX}' || replace(org::text, '-', ''); "
    "  numbers regclass := to_regclass(sequence_name); "
    "BEGIN "
    "  IF numbers IS NULL THEN "
    "    BEGIN "
    "      EXECUTE format('CREATE SEQUENCE %I AS integer', sequence_name); "
    "      PERFORM setval(sequence_name::regclass, coalesce(max(r.number), 0) + 1, false) "
    "        FROM approval_requests AS r WHERE r.org_id = org; "
    "    EXCEPTION WHEN unique_violation OR duplicate_table THEN "
    "      NULL; "
    "    END; "
    "    numbers := to_regclass(sequence_name); "
    "  END IF; "
    "  RETURN nextval(numbers); "
    "END $$",
    "CREATE FUNCTION signoff_drop_request_numbers() RETURNS trigger "
    "LANGUAGE plpgsql AS $$ BEGIN "
    f"  EXECUTE format('DROP SEQUENCE IF EXISTS %I', '{SEQUENCE_PREFIX}' "
    "    || replace(OLD.id::text, '-', '')); "
    "  RETURN NULL; "
    "END $$",
    "CREATE TRIGGER organizations_drop_request_numbers AFTER DELETE ON organizations "
    "FOR EACH ROW EXECUTE FUNCTION signoff_drop_request_numbers()",
    # A truncation deletes without row triggers: every org is gone, and every sequence.
    "CREATE FUNCTION signoff_drop_all_request_numbers() RETURNS trigger "
    f"LANGUAGE plpgsql AS $$ BEGIN {_DROP_ALL_SEQUENCES} RETURN NULL; END $$",
    "CREATE TRIGGER organizations_truncate_request_numbers AFTER TRUNCATE ON organizations "
    "FOR EACH STATEMENT EXECUTE FUNCTION signoff_drop_all_request_numbers()",
]
POSTGRES_DOWNGRADE = [
    "DROP TRIGGER IF EXISTS organizations_truncate_request_numbers ON organizations",
    "DROP FUNCTION IF EXISTS signoff_drop_all_request_numbers()",
    "DROP TRIGGER IF EXISTS organizations_drop_request_numbers ON organizations",
    "DROP FUNCTION IF EXISTS signoff_drop_request_numbers()",
    "DROP FUNCTION IF EXISTS signoff_next_request_number(uuid)",
    f"DO $$ BEGIN {_DROP_ALL_SEQUENCES} END $$",
]


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    if dialect == "postgresql":
        op.add_column("approval_requests", sa.Column("number", sa.Integer(), nullable=True))
        op.execute(_BACKFILL)
        op.alter_column("approval_requests", "number", nullable=False)
    else:
        op.add_column(
            "approval_requests",
            sa.Column("number", sa.Integer(), nullable=False, server_default=sa.text("0")),
        )
        op.execute(_BACKFILL)
    op.create_index(INDEX, "approval_requests", ["org_id", "number"], unique=True)
    for statement in POSTGRES_UPGRADE if dialect == "postgresql" else SQLITE_UPGRADE:
        op.execute(statement)


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    for statement in POSTGRES_DOWNGRADE if dialect == "postgresql" else SQLITE_DOWNGRADE:
        op.execute(statement)
    op.drop_index(INDEX, table_name="approval_requests")
    op.drop_column("approval_requests", "number")
