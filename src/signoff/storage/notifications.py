"""PostgreSQL notifications: one LISTEN connection per process (``ListenHub``), and the
NOTIFYs a process sends after its commits, in batches (``Notifier``)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from signoff.storage.asyncpg_connections import asyncpg_dsn

logger = logging.getLogger(__name__)
# How often a lost LISTEN connection is noticed and opened again, at most.
RECONNECT_SECONDS = 5.0
# Where a request's change of status is announced (migration 0011's trigger, and
# ``AppContext.transaction`` for the hot path's writes): long polls listen.
REQUEST_CHANNEL = "signoff_requests"
# Where written notifications are announced (migration 0015's trigger, and
# ``AppContext.transaction``): notification senders listen.
PLAN_CHANNEL = "signoff_notifications"
# Set in a session's ``info`` when it wrote notifications: after its commit, the
# process's sender is woken (``AppContext.transaction``).
WROTE_NOTIFICATIONS = "signoff.notifications.written"


def _nothing() -> None:
    pass


@dataclass(frozen=True)
class _Handler:
    on_payload: Callable[[str], None]
    on_connect: Callable[[], None]


class ListenHub:
    """The one connection of a process that LISTENs, on every channel the process needs.

    A consumer asks for a channel with ``listen`` when it first needs other processes'
    news (the first long poll, the first live page, a worker's start): a process that
    never waits for anything, such as a CLI command, opens no connection. Each
    notification's payload goes to its channel's ``on_payload``.

    Notifications sent while nobody listened are lost, so each channel's ``on_connect``
    runs whenever its LISTEN is issued, the first time and after every reconnection: its
    consumer looks again then. A lost connection is noticed, and opened again, every
    ``reconnect_seconds``; meanwhile consumers fall back on their periodic re-reads.

    Without a database URL (SQLite) the hub does nothing: a process hears only its own
    changes, in memory (``common.watchers.Watchers``), and re-reads for the others'.
    """

    def __init__(
        self, database_url: str | None, reconnect_seconds: float = RECONNECT_SECONDS
    ) -> None:
        self._dsn = asyncpg_dsn(database_url) if database_url is not None else None
        self.reconnect_seconds = reconnect_seconds
        self._handlers: dict[str, _Handler] = {}
        # Channels LISTENed to on the current connection.
        self._listened: set[str] = set()
        self._connection: Any = None
        self._task: asyncio.Task[None] | None = None
        # Set by ``listen`` for a new channel: the loop listens to it at once.
        self._asked = asyncio.Event()
        # Set once every channel asked for is listened to, or the last attempt failed.
        self._settled = asyncio.Event()
        self._closed = False

    @property
    def alive(self) -> bool:
        return self._connection is not None and not self._connection.is_closed()

    def hears(self, channel: str) -> bool:
        """Whether other processes' notifications on ``channel`` reach this one now."""
        return self.alive and channel in self._listened

    def listen(
        self,
        channel: str,
        on_payload: Callable[[str], None],
        on_connect: Callable[[], None] = _nothing,
    ) -> None:
        """Listen on ``channel`` from now on (call in the event loop; cheap when it
        already does). One handler per channel: the latest given."""
        if self._dsn is None or self._closed:
            return
        new = channel not in self._handlers
        self._handlers[channel] = _Handler(on_payload, on_connect)
        if new:
            self._settled.clear()
            self._asked.set()
        if self._task is None:
            self._task = asyncio.create_task(self._keep_listening(), name="LISTEN")

    async def ready(self) -> None:
        """Return once LISTEN is issued on every channel asked for so far, or the latest
        attempt to connect failed (consumers then re-read periodically); at once when
        there is nothing to listen to (SQLite, or no ``listen`` yet)."""
        if self._task is not None:
            await self._settled.wait()

    async def _keep_listening(self) -> None:
        while True:
            self._asked.clear()
            try:
                connected = await self._listen_to_all()
            except Exception:
                logger.exception("LISTEN failed; trying again shortly")
                connected = False
            if not connected or self._handlers.keys() <= self._listened:
                self._settled.set()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._asked.wait(), self.reconnect_seconds)

    async def _listen_to_all(self) -> bool:
        """Connect if not connected, and LISTEN on each channel asked for and not yet
        listened to; answer whether listening."""
        if not self.alive:
            import asyncpg  # type: ignore[import-untyped]

            await self._close_connection()
            try:
                self._connection = await asyncpg.connect(self._dsn)
            except Exception as exc:
                logger.warning("LISTEN unavailable (%s); re-reading instead", exc)
                return False
        channels = [channel for channel in self._handlers if channel not in self._listened]
        try:
            for channel in channels:
                await self._connection.add_listener(channel, self._notified)
                self._listened.add(channel)
        except Exception as exc:
            logger.warning("LISTEN unavailable (%s); re-reading instead", exc)
            await self._close_connection()
            return False
        for channel in channels:
            self._handlers[channel].on_connect()
        return True

    def _notified(self, _connection: object, _pid: int, channel: str, payload: str) -> None:
        handler = self._handlers.get(channel)
        if handler is not None:
            handler.on_payload(payload)

    async def _close_connection(self) -> None:
        connection, self._connection = self._connection, None
        self._listened.clear()
        if connection is not None:
            with contextlib.suppress(Exception):
                await connection.close(timeout=2)

    async def close(self) -> None:
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self._close_connection()
        self._settled.set()


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
    round trip made a batch for every other call of a busy server, PostgreSQL's work
    sharing the cores with the calls' own. A listener hears of a change that much later.

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
