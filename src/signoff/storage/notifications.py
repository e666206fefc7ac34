"""PostgreSQL notifications (LISTEN) on a connection of their own, reconnected when lost."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from signoff.storage.asyncpg_shape import asyncpg_dsn

logger = logging.getLogger(__name__)
RECONNECT_SECONDS = 5.0


class ChannelListener:
    """Calls ``on_payload`` with each notification's payload on ``channel``, and
    ``on_connect`` each time listening (re)starts: notifications sent while nobody
    listened are lost, so the caller looks again then."""

    def __init__(
        self,
        database_url: str,
        channel: str,
        on_payload: Callable[[str], None],
        on_connect: Callable[[], None] = lambda: None,
    ) -> None:
        self._dsn = asyncpg_dsn(database_url)
        self._channel = channel
        self._on_payload = on_payload
        self._on_connect = on_connect
        self._connection: Any = None
        self._task: asyncio.Task[None] | None = None

    @property
    def alive(self) -> bool:
        return self._connection is not None and not self._connection.is_closed()

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._keep_listening(), name=f"LISTEN {self._channel}")

    async def _keep_listening(self) -> None:
        while True:
            if not self.alive:
                await self._connect()
            await asyncio.sleep(RECONNECT_SECONDS)

    async def _connect(self) -> None:
        import asyncpg  # type: ignore[import-untyped]

        await self._close_connection()
        try:
            self._connection = await asyncpg.connect(self._dsn)
            await self._connection.add_listener(self._channel, self._notified)
        except Exception as exc:
            logger.warning("LISTEN %s unavailable (%s); re-reading instead", self._channel, exc)
            await self._close_connection()
            return
        self._on_connect()

    def _notified(self, _connection: object, _pid: int, _channel: str, payload: str) -> None:
        self._on_payload(payload)

    async def _close_connection(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            with contextlib.suppress(Exception):
                await connection.close(timeout=2)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self._close_connection()


# Every notification of a batch in one statement, so one transaction: PostgreSQL takes
# its notification queue's lock once for the batch.
_NOTIFY_ALL = (
    "SELECT pg_notify(channel, payload) FROM unnest($1::text[], $2::text[]) AS n(channel, payload)"
)
# The least time from one batch to the next, in seconds (``Notifier``).
BATCH_INTERVAL = 0.01
# The Notifier's connection: its transactions only notify (see ``Notifier``).
_NOTIFIER_SETTINGS = {"synchronous_commit": "off"}


class Notifier:
    """Sends NOTIFYs after the commits they tell of, on a connection of its own.

    A transaction that notifies holds the database's notification lock until its commit
    is on disk, so notifying commits are made one at a time (migration 0019). Writes on
    the hot path therefore commit without their triggers' NOTIFY and the process sends
    them here instead, after the commit: what is asked for while a batch is on its way,
    or in the pause after it, goes out together in the next one, each distinct (channel,
    payload) once. An idle process sends at once; a busy one sends at most one batch per
    ``BATCH_INTERVAL``, whatever the rate of its commits.

    Why the pause: each batch is a transaction of its own, with a transaction id, a
    commit record and a wake-up of every listening connection of the database; one per
    round trip was a batch for every two calls of a busy server, PostgreSQL's work
    sharing the cores with the calls' own (docs/engineering-log.md, *Issue 24: where
    PostgreSQL's time goes in a chain*). A listener hears of a change that much later.

    A notification is a wake-up, not a record: one lost (the process killed between a
    commit and its batch, the connection down, the database crashing before the batch's
    commit is on disk) costs a listener its next periodic look. So the batches commit
    without waiting for the disk (``synchronous_commit`` off, on this connection only):
    a listener hears them as soon as they commit, and nothing else waits on them.
    """

    def __init__(self, database_url: str, batch_interval: float = BATCH_INTERVAL) -> None:
        self._dsn = asyncpg_dsn(database_url)
        self.batch_interval = batch_interval
        self._connection: Any = None
        self._pending: dict[tuple[str, str], None] = {}
        self._sending: asyncio.Task[None] | None = None

    def send(self, channel: str, payload: str = "") -> None:
        """Queue a notification; it goes out with the next batch (call after the commit)."""
        self._pending[(channel, payload)] = None
        if self._sending is None:
            self._sending = asyncio.get_running_loop().create_task(
                self._send_pending(), name="NOTIFY after commit"
            )

    async def _send_pending(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self._pending:
                started = loop.time()
                batch, self._pending = list(self._pending), {}
                try:
                    connection = await self._connected()
                    await connection.execute(
                        _NOTIFY_ALL, [channel for channel, _ in batch], [p for _, p in batch]
                    )
                except Exception as exc:
                    logger.warning("NOTIFY of %d changes failed (%s)", len(batch), exc)
                # What is asked for meanwhile waits for the next batch (``send`` starts
                # no other while this task runs).
                await asyncio.sleep(max(0.0, started + self.batch_interval - loop.time()))
        finally:
            self._sending = None

    async def _connected(self) -> Any:
        if self._connection is None or self._connection.is_closed():
            import asyncpg

            self._connection = await asyncpg.connect(self._dsn, server_settings=_NOTIFIER_SETTINGS)
        return self._connection

    async def close(self) -> None:
        # Let what is queued go out (a CLI decision right before its exit).
        if self._sending is not None:
            await asyncio.wait([self._sending], timeout=2)
            if self._sending is not None:
                self._sending.cancel()
        connection, self._connection = self._connection, None
        if connection is not None:
            with contextlib.suppress(Exception):
                await connection.close(timeout=2)
