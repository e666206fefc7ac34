"""PostgreSQL's LISTEN/NOTIFY seen from outside the app: what a channel carries, when
nothing more sent before a moment can still arrive, and when a process listens.

Tests wait for these positive signals instead of sleeping "long enough": a sleep passes
by luck when the machine is fast, and asserts nothing when it is slow.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg  # type: ignore[import-untyped]

from signoff.config import Settings
from signoff.storage import Notifier
from signoff.storage.asyncpg_connections import asyncpg_dsn
from tests.conftest import eventually


class Heard(list[str]):
    """The payloads heard on one channel, in the order they arrived."""

    def __init__(self, connection: Any, channel: str) -> None:
        super().__init__()
        self._connection = connection
        self._channel = channel

    async def everything_sent_so_far(self, *notifiers: Notifier | None) -> None:
        """Returns once every notification sent on the channel before the call has been
        heard, so that what is not heard by then never will be.

        PostgreSQL delivers notifications in the order their transactions commit. So a
        marker is sent after them, on this connection and through each ``notifiers`` (a
        process sends its after-commit notifications through its own ``Notifier``, one
        batch after another: a marker goes out with or after what it was asked before),
        and once every marker is heard, whatever committed before them has been too. The
        markers are then left out of the list. (A process's ``notifier`` is None only on
        SQLite, which has no notifications.)
        """
        senders = [notifier for notifier in notifiers if notifier is not None]
        markers = [f"marker {uuid.uuid4()}" for _ in range(len(senders) + 1)]
        for notifier, marker in zip(senders, markers[1:], strict=True):
            notifier.send(self._channel, marker)
        await self._connection.execute("SELECT pg_notify($1, $2)", self._channel, markers[0])
        await eventually(lambda: all(m in self for m in markers), "the markers to arrive")
        for marker in markers:
            self.remove(marker)


@asynccontextmanager
async def heard(settings: Settings, channel: str) -> AsyncIterator[Heard]:
    """The payloads another connection hears on ``channel`` while the block runs."""
    connection = await asyncpg.connect(asyncpg_dsn(settings.database_url))
    payloads = Heard(connection, channel)

    def on_notify(_connection: Any, _pid: int, _channel: str, payload: str) -> None:
        payloads.append(payload)

    await connection.add_listener(channel, on_notify)
    try:
        yield payloads
    finally:
        await connection.close()


# The connections of this database, other than the asking one, whose last statement was
# a LISTEN naming the channel, and finished (LISTEN takes effect as it commits).
_LISTENING = """
SELECT pid FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid()
  AND state = 'idle' AND query ILIKE 'LISTEN %' AND strpos(query, $1) > 0
"""


@asynccontextmanager
async def starts_listening(database_url: str, channel: str) -> AsyncIterator[None]:
    """Waits, as the block ends, until a connection opened since it began listens on
    ``channel``: what is notified from then on reaches the process the block started
    listening. Connections that listened before the block (a closed context's, still
    on its way out) do not count."""
    connection = await asyncpg.connect(asyncpg_dsn(database_url))
    try:
        before = {row["pid"] for row in await connection.fetch(_LISTENING, channel)}
        yield

        async def new_listener() -> bool:
            rows = await connection.fetch(_LISTENING, channel)
            return any(row["pid"] not in before for row in rows)

        await eventually(new_listener, f"a new connection to LISTEN on {channel}")
    finally:
        await connection.close()
