"""What one process has seen of each receiver: did its last attempt answer, or fail?

Why: a worker draining a backlog used to send every receiver up to
``SIGNOFF_DELIVERY_PER_TARGET_CONCURRENCY`` attempts at once, the dead ones included, and
at saturation those attempts took turns from receivers that answer (docs/performance.md).
So a receiver gets that many attempts at once only after it has answered (slow start:
one at a time until then, and again after a failure), and claims take the due
deliveries of receivers whose last attempt failed after everyone else's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Receivers remembered at most, the least recently attempted forgotten first: a forgotten
# receiver starts again at one attempt at a time.
MAX_REMEMBERED = 1_000


@dataclass
class ReceiverRecord:
    per_target: int
    max_remembered: int = MAX_REMEMBERED
    # target -> whether its last attempt succeeded; least recently attempted first.
    _answered: dict[str, bool] = field(default_factory=dict, init=False)

    def note(self, target: str, *, success: bool) -> None:
        self._answered.pop(target, None)
        self._answered[target] = success
        if len(self._answered) > self.max_remembered:
            del self._answered[next(iter(self._answered))]

    def cap(self, target: str) -> int:
        """How many attempts ``target`` may have in flight from this process."""
        return self.per_target if self._answered.get(target) else 1

    def failing(self) -> frozenset[str]:
        """Receivers whose last attempt failed."""
        return frozenset(target for target, ok in self._answered.items() if not ok)
