"""Who waits for a change of what: an in-process registry of wake-ups, keyed by what changes.

Long polls watch a request (by its id), the dashboard's live pages watch an org: the
writer that commits a change calls ``notify`` with its key, and every watcher of that key
wakes. Changes made by other processes reach it through ``storage.ListenHub``, whose
handlers call ``notify`` too.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


class Watchers(Generic[K]):
    """Wake-ups per key. A watcher registers with ``watch`` *before* it reads, so a change
    that commits between its read and its wait still wakes it.

    ``on_watch`` runs at every ``watch``: where the process starts hearing of other
    processes' changes, once someone waits for them.

    ``close`` wakes every watcher for good as the process shuts down: each answers with
    what it can read now instead of holding the shutdown up until its wait ends.
    """

    def __init__(self, on_watch: Callable[[], None] | None = None) -> None:
        self._events: dict[K, set[asyncio.Event]] = {}
        self._on_watch = on_watch
        self.closing = False

    @contextmanager
    def watch(self, key: K) -> Iterator[asyncio.Event]:
        if self._on_watch is not None:
            self._on_watch()
        event = asyncio.Event()
        self._events.setdefault(key, set()).add(event)
        try:
            yield event
        finally:
            events = self._events.get(key)
            if events is not None:
                events.discard(event)
                if not events:
                    del self._events[key]

    def notify(self, key: K) -> None:
        for event in self._events.get(key, ()):
            event.set()

    def notify_all(self) -> None:
        """Wake everyone: what changed while nobody could tell them went unnoticed."""
        for events in self._events.values():
            for event in events:
                event.set()

    def close(self) -> None:
        self.closing = True
        self.notify_all()

    def __len__(self) -> int:
        """Keys watched now."""
        return len(self._events)

    def waiting(self) -> int:
        """Watchers waiting now (several may watch one key)."""
        return sum(len(events) for events in self._events.values())
