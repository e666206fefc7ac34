"""What one process has seen of each receiver: did its last attempt answer, or fail?

Why: a worker draining a backlog used to send every receiver up to
``SIGNOFF_DELIVERY_PER_TARGET_CONCURRENCY`` attempts at once, the dead ones included, and
at saturation those attempts took turns from receivers that answer
(docs/decisions/0021-expiry-storms-and-the-callback-worker.md).
So a receiver gets that many attempts at once only after it has answered (slow start:
one at a time until then, and again after a failure), and a receiver whose last attempt
failed is *held* for ``HOLD_SECONDS``: its due deliveries are claimed only when those of
the others leave room in a claim. Below saturation there is always room, and retries go
out on their schedule; at saturation a failing receiver gets about one attempt (a probe)
per hold, however old its backlog, instead of a turn in every claim.

A receiver whose last attempt succeeded quickly may also have deliveries claimed *ahead*
of its free slots (``claim_ahead``), queued in the worker for the next slot to free:
with 16 slots refilled only by claim transactions, a fast receiver's slots stood empty
while each claim went to the database, and a claim took a handful of deliveries. A slow
receiver gets nothing ahead: its queued deliveries would wait out their leases.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

# Receivers remembered at most, the least recently attempted forgotten first: a forgotten
# receiver starts again at one attempt at a time.
MAX_REMEMBERED = 1_000
# How long after a failed attempt its receiver waits behind the others (when they fill
# the claims): a receiver back up is found again within this time.
HOLD_SECONDS = 10.0
# A fast receiver may have this many times its cap claimed at once (in flight and queued).
CLAIM_AHEAD_FACTOR = 4
# An answer within this time counts as fast.
FAST_ANSWER_SECONDS = 0.5


@dataclass(frozen=True)
class _LastAttempt:
    success: bool
    ended_at: float  # on the record's clock
    fast: bool = False


@dataclass
class ReceiverRecord:
    per_target: int
    max_remembered: int = MAX_REMEMBERED
    hold_seconds: float = HOLD_SECONDS
    clock: Callable[[], float] = time.monotonic
    # target -> its last attempt; least recently attempted first.
    _last: dict[str, _LastAttempt] = field(default_factory=dict, init=False)

    def note(self, target: str, *, success: bool, seconds: float | None = None) -> None:
        """``seconds``: how long the attempt took (None: not known, not fast)."""
        self._last.pop(target, None)
        fast = success and seconds is not None and seconds < FAST_ANSWER_SECONDS
        self._last[target] = _LastAttempt(success, self.clock(), fast)
        if len(self._last) > self.max_remembered:
            del self._last[next(iter(self._last))]

    def cap(self, target: str) -> int:
        """How many attempts ``target`` may have in flight from this process."""
        last = self._last.get(target)
        return self.per_target if last is not None and last.success else 1

    def claim_ahead(self, target: str) -> int:
        """How many deliveries to ``target`` this process may hold at once, in flight and
        queued for a slot: ``CLAIM_AHEAD_FACTOR`` times its cap while its last attempt
        succeeded fast, otherwise its cap."""
        last = self._last.get(target)
        if last is not None and last.fast:
            return self.per_target * CLAIM_AHEAD_FACTOR
        return self.cap(target)

    def held(self) -> frozenset[str]:
        """Receivers whose last attempt failed less than ``hold_seconds`` ago."""
        since = self.clock() - self.hold_seconds
        return frozenset(
            target
            for target, last in self._last.items()
            if not last.success and last.ended_at > since
        )
