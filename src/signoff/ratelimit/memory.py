"""Fixed-window counters in this process's memory: the default rate-limit store.

Why not ``limits``' own ``MemoryStorage``: every increment there takes an
``asyncio.Lock`` and starts a task to sweep expired keys (one task per call, since each
sweep ends at once), work that every API call paid for (``make bench-replacements``;
docs/performance.md, *Hand-written replacements and what they earn*). On one event
loop no call can interleave with another inside a plain function, so a dict does the
job; expired counters are swept out at most once per ``SWEEP_SECONDS``, in one pass.

It answers the calls ``RateLimiter`` makes of a store (``limits``' ``Storage``
interface, as ``RedisStorage`` answers them for replicas that share their counts).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

SWEEP_SECONDS = 60.0


@dataclass
class _Counter:
    count: int
    expires_at: float  # time.time() when the window ends


class MemoryCounters:
    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._counters: dict[str, _Counter] = {}
        self._next_sweep = clock() + SWEEP_SECONDS

    async def incr(self, key: str, expiry: float, amount: int = 1) -> int:
        """Count ``amount`` calls in ``key``'s window, opening a window of ``expiry``
        seconds if none is open; the window's count so far."""
        now = self._clock()
        self._sweep_if_due(now)
        counter = self._live(key, now)
        if counter is None:
            counter = self._counters[key] = _Counter(0, now + expiry)
        counter.count += amount
        return counter.count

    async def get(self, key: str) -> int:
        counter = self._live(key, self._clock())
        return counter.count if counter is not None else 0

    async def get_expiry(self, key: str) -> float:
        """When ``key``'s window ends (now, if none is open)."""
        now = self._clock()
        counter = self._live(key, now)
        return counter.expires_at if counter is not None else now

    async def reset(self) -> int:
        cleared = len(self._counters)
        self._counters.clear()
        return cleared

    async def check(self) -> bool:
        return True

    def __len__(self) -> int:
        """Counters held, expired ones not yet swept included."""
        return len(self._counters)

    def _live(self, key: str, now: float) -> _Counter | None:
        counter = self._counters.get(key)
        if counter is not None and counter.expires_at <= now:
            del self._counters[key]
            return None
        return counter

    def _sweep_if_due(self, now: float) -> None:
        # Keys of callers that never come back (addresses, mostly) must not pile up.
        if now < self._next_sweep:
            return
        self._next_sweep = now + SWEEP_SECONDS
        expired = [key for key, counter in self._counters.items() if counter.expires_at <= now]
        for key in expired:
            del self._counters[key]
