"""Live updates of the dashboard: an org-level "something changed" signal.

Long polls watch one request (``Wiring.waiters``); this wakes the open inboxes of one
org, which then read their rows again. In one process the signal is an in-memory
broadcast. On PostgreSQL each process also sends it with NOTIFY (in the process's batches
after commit, ``storage.Notifier``) and hears the others' through its ``storage.ListenHub``,
so a request created or decided on any replica reaches every replica's open pages.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid

from signoff.common.watchers import Watchers
from signoff.storage import ListenHub, Notifier

NOTIFY_CHANNEL = "signoff_live"


class OrgSignals:
    """Per-org wake-ups for the dashboard's server-sent events."""

    def __init__(self, hub: ListenHub, notifier: Notifier | None = None) -> None:
        """PostgreSQL: ``hub`` hears other processes' signals, ``notifier`` sends ours."""
        self._watchers: Watchers[uuid.UUID] = Watchers()
        # How many changes this process has heard of, per org: what ``CountsCache`` keys on.
        self._versions: dict[uuid.UUID, int] = {}
        self._hub = hub
        self._notifier = notifier
        self.counts = CountsCache(self)

    def version(self, org_id: uuid.UUID) -> int:
        return self._versions.get(org_id, 0)

    def watch(self, org_id: uuid.UUID) -> contextlib.AbstractContextManager[asyncio.Event]:
        return self._watchers.watch(org_id)

    async def start_listening(self) -> None:
        """PostgreSQL: make sure this process hears other processes' changes."""
        self._hub.listen(NOTIFY_CHANNEL, self._heard)
        await self._hub.ready()

    def request_changed(self, org_id: uuid.UUID) -> None:
        """A request of the org was created or left pending (the hook of every writer)."""
        self._wake(org_id)
        if self._notifier is not None:
            # A burst's changes of one org go out as one notification (``Notifier``).
            self._notifier.send(NOTIFY_CHANNEL, org_id.hex)

    def _heard(self, payload: str) -> None:
        with contextlib.suppress(ValueError):
            self._wake(uuid.UUID(hex=payload))

    def _wake(self, org_id: uuid.UUID) -> None:
        self._versions[org_id] = self._versions.get(org_id, 0) + 1
        self._watchers.notify(org_id)


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
