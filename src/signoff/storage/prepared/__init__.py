"""Statements of the hot request path, compiled once and run past the ORM.

The SQL is written with SQLAlchemy Core and compiled by the dialect; only the execution
is direct. Four parts, one module each:

- ``statements``: ``PreparedQuery`` compiled once per dialect, with SQLAlchemy's own value
  conversions both ways, and ``SQLiteIndex``, the hints SQLite is given;
- ``runner``: ``QueryRunner``, the reads (and autocommit writes) outside any session;
- ``session_io``: statements inside a session's transaction (``execute_in``,
  ``count_in``, ``execute_alone``), on the connection under it;
- ``write_batching``: PostgreSQL writes queued and sent as one statement (``queue_write``),
  or as one statement that is a transaction of its own (``writes_alone``, ``LostRace``).
"""

from signoff.storage.prepared.runner import QueryRunner
from signoff.storage.prepared.session_io import (
    QUEUED_WRITES_KEY,
    SQLITE_CONNECTION_KEY,
    STOCK_EXECUTION_KEY,
    QueuingSession,
    SQLiteTransaction,
    count_in,
    discard_queued_writes,
    execute_alone,
    execute_in,
    has_unflushed_changes,
    holds_sqlite_write_lock,
    inline_driver,
    notifies_left_to_caller,
    sqlite_transaction_of,
    stock_execution_info,
)
from signoff.storage.prepared.statements import (
    STOCK_EXECUTION_SWITCH,
    PreparedQuery,
    SQLiteIndex,
    entity_columns,
    switched,
)
from signoff.storage.prepared.write_batching import (
    LostRace,
    may_write_alone,
    queue_write,
    savepoint,
    send_queued_writes,
    writes_alone,
)

__all__ = [
    "QUEUED_WRITES_KEY",
    "SQLITE_CONNECTION_KEY",
    "STOCK_EXECUTION_KEY",
    "STOCK_EXECUTION_SWITCH",
    "LostRace",
    "PreparedQuery",
    "QueryRunner",
    "QueuingSession",
    "SQLiteIndex",
    "SQLiteTransaction",
    "count_in",
    "discard_queued_writes",
    "entity_columns",
    "execute_alone",
    "execute_in",
    "has_unflushed_changes",
    "holds_sqlite_write_lock",
    "inline_driver",
    "may_write_alone",
    "notifies_left_to_caller",
    "queue_write",
    "savepoint",
    "send_queued_writes",
    "sqlite_transaction_of",
    "stock_execution_info",
    "switched",
    "writes_alone",
]
