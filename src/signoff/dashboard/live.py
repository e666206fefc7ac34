"""Live updates of the dashboard: an org-level "something changed" signal.

``RequestWaiters`` (context.py) wakes long polls of one request; this wakes the open
inboxes of one org, which then read their rows again. In one process the signal is an
in-memory broadcast. On PostgreSQL each process also sends it with NOTIFY (in the
process's batches after commit, ``storage.notifications.Notifier``) and listens on one
dedicated connection, so a request created or decided on any replica reaches every
replica's open pages.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Iterator
from typing import Any

from sqlalchemy.engine import make_url

from signoff.storage import Notifier

logger = logging.getLogger(__name__)

NOTIFY_CHANNEL = "signoff_live"


class OrgSignals:
    """Per-org wake-ups for the dashboard's server-sent events."""

    def __init__(self, database_url: str | None = None, notifier: Notifier | None = None) -> None:
        """PostgreSQL: ``database_url`` to listen on, ``notifier`` to send with."""
        self._watchers: dict[uuid.UUID, set[asyncio.Event]] = {}
        # How many changes this process has heard of, per org: what ``CountsCache`` keys on.
        self._versions: dict[uuid.UUID, int] = {}
        self._postgres = _PostgresRelay(database_url, self._wake) if database_url else None
        self._notifier = notifier
        self.counts = CountsCache(self)

    def version(self, org_id: uuid.UUID) -> int:
        return self._versions.get(org_id, 0)

    @contextlib.contextmanager
    def watch(self, org_id: uuid.UUID) -> Iterator[asyncio.Event]:
        event = asyncio.Event()
        self._watchers.setdefault(org_id, set()).add(event)
        try:
            yield event
        finally:
            watchers = self._watchers.get(org_id)
            if watchers is not None:
                watchers.discard(event)
                if not watchers:
                    del self._watchers[org_id]

    async def start_listening(self) -> None:
        """PostgreSQL: make sure this process hears other processes' changes."""
        if self._postgres is not None:
            await self._postgres.ensure_listening()

    def request_changed(self, org_id: uuid.UUID) -> None:
        """A request of the org was created or left pending (the hook of every writer)."""
        self._wake(org_id)
        if self._notifier is not None:
            # A burst's changes of one org go out as one notification (``Notifier``).
            self._notifier.send(NOTIFY_CHANNEL, org_id.hex)

    def _wake(self, org_id: uuid.UUID) -> None:
        self._versions[org_id] = self._versions.get(org_id, 0) + 1
        for event in self._watchers.get(org_id, ()):
            event.set()

    async def close(self) -> None:
        if self._postgres is not None:
            await self._postgres.close()


class CountsCache:
    """Counts the navigation shows on every page (requests waiting for a person), kept
    until their org changes in this process or ``ttl`` seconds pass (changes made by
    other processes this one did not hear of)."""

    MAX_ENTRIES = 10_000

    def __init__(self, signals: OrgSignals, ttl: float = 5.0) -> None:
        self._signals = signals
        self._ttl = ttl
        self._entries: dict[tuple[uuid.UUID, uuid.UUID], tuple[int, float, object]] = {}

    def get(self, org_id: uuid.UUID, key: uuid.UUID) -> object | None:
        entry = self._entries.get((org_id, key))
        if entry is None:
            return None
        version, at, value = entry
        if version != self._signals.version(org_id) or time.monotonic() - at > self._ttl:
            return None
        return value

    def put(self, org_id: uuid.UUID, key: uuid.UUID, value: object) -> None:
        if len(self._entries) >= self.MAX_ENTRIES:
            self._entries.clear()
        self._entries[(org_id, key)] = (self._signals.version(org_id), time.monotonic(), value)


class _PostgresRelay:
    """One asyncpg connection per process that LISTENs for the org signals."""

    def __init__(self, database_url: str, on_signal: Any) -> None:
        self.dsn = (
            make_url(database_url)
            .set(drivername="postgresql")
            .render_as_string(hide_password=False)
        )
        self.on_signal = on_signal
        self._connection: Any = None
        self._lock = asyncio.Lock()

    async def _connected(self) -> Any:
        if self._connection is not None and not self._connection.is_closed():
            return self._connection
        import asyncpg  # type: ignore[import-untyped]

        self._connection = await asyncpg.connect(self.dsn)
        await self._connection.add_listener(NOTIFY_CHANNEL, self._notified)
        return self._connection

    async def ensure_listening(self) -> None:
        async with self._lock:
            try:
                await self._connected()
            except Exception as exc:
                logger.warning("LISTEN %s unavailable (%s)", NOTIFY_CHANNEL, exc)

    def _notified(self, _connection: Any, _pid: int, _channel: str, payload: str) -> None:
        with contextlib.suppress(ValueError):
            self.on_signal(uuid.UUID(hex=payload))

    async def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            with contextlib.suppress(Exception):
                await connection.close(timeout=2)
