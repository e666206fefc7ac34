"""What one process has seen of each receiver: did its last attempt answer, or fail?

Why: a worker draining a backlog used to send every receiver up to
``SIGNOFF_DELIVERY_PER_TARGET_CONCURRENCY`` attempts at once, the dead ones included, and
at saturation those attempts took turns from receivers that answer (``make
bench-callbacks``, throughput stage; docs/engineering-log.md, *Decision callbacks*).
So a receiver gets that many attempts at once only after it has answered (slow start:
one at a time until then, and again after a failure), and a receiver whose last attempt
failed is *held* for ``HOLD_SECONDS``: its due deliveries are claimed only when those of
the others leave room in a claim. Below saturation there is always room, and retries go
out on their schedule; at saturation a failing receiver gets about one attempt (a probe)
per hold, however old its backlog, instead of a turn in every claim.
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


@dataclass(frozen=True)
class _LastAttempt:
    success: bool
    ended_at: float  # on the record's clock


@dataclass
class ReceiverRecord:
    per_target: int
    max_remembered: int = MAX_REMEMBERED
    hold_seconds: float = HOLD_SECONDS
    clock: Callable[[], float] = time.monotonic
    # target -> its last attempt; least recently attempted first.
    _last: dict[str, _LastAttempt] = field(default_factory=dict, init=False)

    def note(self, target: str, *, success: bool) -> None:
        self._last.pop(target, None)
        self._last[target] = _LastAttempt(success, self.clock())
        if len(self._last) > self.max_remembered:
            del self._last[next(iter(self._last))]

    def cap(self, target: str) -> int:
        """How many attempts ``target`` may have in flight from this process."""
        last = self._last.get(target)
        return self.per_target if last is not None and last.success else 1

    def held(self) -> frozenset[str]:
        """Receivers whose last attempt failed less than ``hold_seconds`` ago."""
        since = self.clock() - self.hold_seconds
        return frozenset(
            target
            for target, last in self._last.items()
            if not last.success and last.ended_at > since
        )
