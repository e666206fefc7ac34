"""Storage: every database trick in one package, behind one seam.

Domain modules (approvals, orgs, webhooks, ...) import from ``signoff.storage`` only, and
only what is listed here: the ``Database`` (engines, sessions, transactions) and the
prepared-statement helpers their repositories run hot-path queries with. None of them
sees a driver type. What lies behind the seam:

- ``database``: engines and sessions for SQLite and PostgreSQL, and the few places where
  the two differ (``insert_ignoring_conflicts``);
- ``sqlite_driver``: SQLite connections used on the event loop's thread, busy retries,
  and the checkpointer;
- ``group_commit``: SQLite writers of one process queued and sharing transactions;
- ``prepared``: statements of the hot path compiled once and run past the ORM;
- ``asyncpg_connections``: asyncpg connections for the hot path on PostgreSQL, and the only code
  that reaches under SQLAlchemy's asyncpg adapter;
- ``notifications``: the one connection of a process that LISTENs, on every channel it
  needs (``ListenHub``), and the NOTIFYs a process sends after its commits, in batches
  (``Notifier``);
- ``aiosqlite_lookalike``: the only code that knows SQLAlchemy's aiosqlite adapter's private
  attributes (tests/storage/test_aiosqlite_lookalike.py fails loudly if an upgrade moves them).

Why each is there, and what ``make bench`` measures of it: docs/architecture.md and
docs/performance.md.
"""

from signoff.storage.database import Database, insert_ignoring_conflicts, not_among
from signoff.storage.notifications import (
    PLAN_CHANNEL,
    REQUEST_CHANNEL,
    WROTE_NOTIFICATIONS,
    ListenHub,
    Notifier,
)
from signoff.storage.prepared import (
    LostRace,
    PreparedQuery,
    QueryRunner,
    QueuingSession,
    SQLiteIndex,
    count_in,
    discard_queued_writes,
    entity_columns,
    execute_alone,
    execute_in,
    has_unflushed_changes,
    holds_sqlite_write_lock,
    may_write_alone,
    notifies_left_to_caller,
    queue_write,
    savepoint,
    send_queued_writes,
    writes_alone,
)

__all__ = [
    "PLAN_CHANNEL",
    "REQUEST_CHANNEL",
    "WROTE_NOTIFICATIONS",
    "Database",
    "ListenHub",
    "LostRace",
    "Notifier",
    "PreparedQuery",
    "QueryRunner",
    "QueuingSession",
    "SQLiteIndex",
    "count_in",
    "discard_queued_writes",
    "entity_columns",
    "execute_alone",
    "execute_in",
    "has_unflushed_changes",
    "holds_sqlite_write_lock",
    "insert_ignoring_conflicts",
    "may_write_alone",
    "not_among",
    "notifies_left_to_caller",
    "queue_write",
    "savepoint",
    "send_queued_writes",
    "writes_alone",
]
