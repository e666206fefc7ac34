"""Rows a background job cannot process, kept from blocking the rows behind them.

A batch job (the expiry sweep, the emergency stop's cancellations, the delivery worker)
handles each row in a savepoint of its own. When one row fails, its savepoint is rolled
back, the rest of the batch commits, and the row is *parked*: logged with its id, counted
(``signoff_poisoned_rows_total`` on ``/metrics``), and left out of the job's batches for a
while before it is tried again, so a row that keeps failing costs one attempt per period
instead of holding the batch it sits in.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from signoff.metrics import count_poisoned_row

logger = logging.getLogger("signoff.poison")

# A parked row is tried again after this long: a fix (a new release, an operator's edit)
# takes effect without a restart, and a row still failing costs one try per period.
DEFAULT_RETRY_AFTER_SECONDS = 600.0


@dataclass
class PoisonedRows:
    """The rows this process has parked, by job, and how many it has parked in all."""

    retry_after_seconds: float = DEFAULT_RETRY_AFTER_SECONDS
    clock: Callable[[], float] = time.monotonic
    counts: Counter[str] = field(default_factory=Counter)
    _parked: dict[str, dict[uuid.UUID, float]] = field(default_factory=dict)

    def park(self, job: str, row_id: uuid.UUID, error: BaseException) -> None:
        """Note that ``job`` could not process ``row_id``; it is skipped for a while."""
        self.counts[job] += 1
        count_poisoned_row(job)
        self._parked.setdefault(job, {})[row_id] = self.clock() + self.retry_after_seconds
        logger.error(
            "%s: row %s could not be processed and is parked for %.0f s: %s: %s",
            job,
            row_id,
            self.retry_after_seconds,
            type(error).__name__,
            error,
            exc_info=error,
        )

    def parked(self, job: str) -> frozenset[uuid.UUID]:
        """The rows ``job`` should leave out now (those whose wait is over are let back)."""
        rows = self._parked.get(job)
        if not rows:
            return frozenset()
        now = self.clock()
        for row_id in [r for r, until in rows.items() if until <= now]:
            del rows[row_id]
        return frozenset(rows)
