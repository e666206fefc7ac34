"""The expiry sweep: writes down what reads already show, pending requests past deadline.

Runs inside ``signoff serve`` and ``signoff worker``; any number may run at once (rows are
claimed with SKIP LOCKED on PostgreSQL, and SQLite has one writer at a time). A pass does
not promise every due request: on PostgreSQL it leaves those another transaction holds
(``ApprovalRepository.due_for_expiry``) to the next pass, an interval later. Reads show
them expired meanwhile.
"""

from __future__ import annotations

import asyncio
import logging

from signoff.approvals import service
from signoff.common.poison import PoisonedRows
from signoff.common.time import utcnow
from signoff.context import AppContext
from signoff.logs import request_id_scope
from signoff.webhooks.service import FirstAttempt

logger = logging.getLogger(__name__)
# Requests expired per transaction. On SQLite the batch holds the one writer, and in
# ``signoff serve`` the API's event loop, while it is written: small enough that other
# orgs' calls wait little. On PostgreSQL it locks only its own rows, and a larger batch
# costs fewer round trips per request (``make bench-expiry``).
BATCH_SIZES = {"sqlite": 100, "postgresql": 500}


def batch_size(ctx: AppContext) -> int:
    return BATCH_SIZES.get(ctx.db.dialect, 100)


async def sweep_expired_once(ctx: AppContext, poisoned: PoisonedRows) -> int:
    """Expire one batch of due requests; returns how many rows it took (expired or parked)."""
    parked_before = poisoned.counts[service.EXPIRY_JOB]
    # One id per batch: its log lines and the expiry callbacks it writes share it.
    with request_id_scope():
        # The expiry callbacks commit with the expiries; the delivery workers send them.
        async with ctx.transaction(FirstAttempt.BY_WORKERS) as uow:
            results = await service.expire_due(uow, utcnow(), batch_size(ctx), poisoned)
    return len(results) + poisoned.counts[service.EXPIRY_JOB] - parked_before


async def run_expiry_sweep(ctx: AppContext, poisoned: PoisonedRows, stop: asyncio.Event) -> None:
    interval = ctx.settings.expiry_sweep_interval_seconds
    while not stop.is_set():
        try:
            while await sweep_expired_once(ctx, poisoned) == batch_size(ctx):
                pass  # a backlog: keep going before sleeping
        except Exception:
            logger.exception("expiry sweep failed; retrying after the interval")
        try:
            await asyncio.wait_for(stop.wait(), interval)
        except TimeoutError:
            pass
