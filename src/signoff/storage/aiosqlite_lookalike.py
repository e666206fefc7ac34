"""The one place that knows what SQLAlchemy's aiosqlite adapter reads of a connection.

Our SQLite connections (``sqlite_driver.InlineConnection``) run every call on the event
loop's thread, where aiosqlite hands each to a thread of its own. SQLAlchemy's aiosqlite
dialect wraps them in ``AsyncAdapt_aiosqlite_connection``, which reaches past aiosqlite's
public interface into three private attributes of the connection it wraps:

- ``_conn``: the ``sqlite3`` connection (to set ``isolation_level``);
- ``_tx``: aiosqlite's call queue (``put_nowait((future, function))``);
- ``_connection``: tested for truth before a ping or a rollback.

``AiosqliteLookalike`` provides exactly those; ``tests/storage/test_aiosqlite_lookalike.py``
reads the installed SQLAlchemy's adapter and fails, naming the attribute, if an upgrade
reads anything else. Nothing else in signoff touches a private attribute of SQLAlchemy or
aiosqlite.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sqlalchemy.dialects.sqlite.aiosqlite import SQLiteDialect_aiosqlite
from sqlalchemy.engine import make_url

# The private attributes of an aiosqlite connection that SQLAlchemy's adapter reads.
ADAPTER_READS = frozenset({"_conn", "_tx", "_connection"})


class InlineQueue:
    """Stands in for aiosqlite's call queue, which the dialect uses directly to set
    ``isolation_level``: the call runs at once and settles its future."""

    def put_nowait(self, item: tuple[asyncio.Future[Any] | None, Callable[[], Any]]) -> None:
        future, function = item
        try:
            result = function()
        except BaseException as error:
            if future is None:
                raise
            future.set_exception(error)
        else:
            if future is not None:
                future.set_result(result)


class AiosqliteLookalike:
    """A connection carrying the private attributes the adapter reads (see above)."""

    def __init__(self, connection: sqlite3.Connection) -> None:
        self._conn = connection
        self._connection = connection
        self._tx = InlineQueue()


def sqlite_connect_args(url: str) -> tuple[Sequence[Any], Mapping[str, Any]]:
    """The ``sqlite3.connect`` arguments SQLAlchemy's aiosqlite dialect derives from ``url``
    (file name, URI mode, timeouts), so our connections open what the engine would."""
    args, kwargs = SQLiteDialect_aiosqlite().create_connect_args(make_url(url))
    return args, kwargs
