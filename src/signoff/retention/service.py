"""Purging old finished requests in bounded batches (``signoff purge``, and the worker's
periodic run with ``SIGNOFF_RETENTION_DAYS``).

Each batch is its own short transaction: a purge of millions of rows never holds SQLite's
writer or PostgreSQL's row locks for longer than one batch takes, and API writes go on in
between. Pending requests are never touched, nor finished ones whose callback is still on
its retry schedule.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from signoff.audit.service import CheckpointPolicy, Signer, hold_for_purge, prune_for_purge
from signoff.common.time import utcnow
from signoff.context import AppContext
from signoff.policies import service as policies
from signoff.retention.repository import RetentionRepository
from signoff.unit_of_work import UnitOfWork

logger = logging.getLogger(__name__)

DEFAULT_BATCH_SIZE = 500
# How often the worker applies SIGNOFF_RETENTION_DAYS.
RETENTION_INTERVAL_SECONDS = 3600.0

Transaction = Callable[[], AbstractAsyncContextManager[UnitOfWork]]


@dataclass
class PurgeReport:
    before: datetime
    dry_run: bool
    requests: int = 0
    batches: int = 0
    # Rows deleted by kind (requests, events, votes, ...); empty in a dry run.
    rows: Counter[str] = field(default_factory=Counter)


def _repo(uow: UnitOfWork) -> RetentionRepository:
    return RetentionRepository(uow.session, uow.dialect)


async def _org_ids(transaction: Transaction, org_id: uuid.UUID | None) -> list[uuid.UUID]:
    if org_id is not None:
        return [org_id]
    async with transaction() as uow:
        return await _repo(uow).org_ids()


async def purge(
    transaction: Transaction,
    before: datetime,
    *,
    org_id: uuid.UUID | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    dry_run: bool = False,
    sign: Signer | None = None,
) -> PurgeReport:
    """Delete finished requests decided before ``before`` (of one org, or of all), batch
    by batch; or, with ``dry_run``, count them. ``sign``: the audit chain's signer; with
    it each batch first signs a "pruned" checkpoint, so the org's chain still verifies
    from there (docs/audit.md, "Retention")."""
    report = PurgeReport(before, dry_run)
    for org in await _org_ids(transaction, org_id):
        if dry_run:
            async with transaction() as uow:
                report.requests += await _repo(uow).count_purgeable(org, before)
            continue
        async for deleted in _batches(transaction, org, before, batch_size, sign):
            report.batches += 1
            report.requests += deleted["requests"]
            report.rows.update(deleted)
    return report


async def _batches(
    transaction: Transaction,
    org_id: uuid.UUID,
    before: datetime,
    batch_size: int,
    sign: Signer | None,
) -> AsyncIterator[dict[str, int]]:
    while True:
        async with transaction() as uow:
            repo = _repo(uow)
            ids = await repo.purgeable_ids(org_id, before, batch_size)
            # The org's chain head is locked before its events are deleted, as every
            # sealer locks it before it takes events: one lock order, no deadlock.
            if ids and sign is not None:
                await prune_for_purge(
                    uow.session, uow.dialect, org_id, list(ids), sign, _NO_CHECKPOINT, utcnow()
                )
            elif ids:
                await hold_for_purge(uow.session, uow.dialect, org_id)
            deleted = await repo.delete_requests(ids) if ids else None
        if deleted is None:
            return
        yield deleted
        if len(ids) < batch_size:
            return
        await asyncio.sleep(0)  # let other work of this process run between batches


# Sealing during a purge signs only the "pruned" checkpoint; the worker signs heads.
_NO_CHECKPOINT = CheckpointPolicy(every_events=2**62, every_seconds=float("inf"))


def chain_signer(ctx: AppContext) -> Signer:
    """The receipts' current key, looked up when signing (``ctx.transaction`` loads it)."""

    def sign(payload: bytes, typ: str) -> str:
        return ctx.keys.current.sign(payload, typ)

    return sign


async def run_retention(ctx: AppContext, stop: asyncio.Event) -> None:
    """The worker's loop: every hour, forget spent policy budget windows and, with
    SIGNOFF_RETENTION_DAYS, purge the requests older than that."""
    days = ctx.settings.retention_days
    while not stop.is_set():
        await _purge_spent_budgets(ctx)
        if days is not None:
            await _purge_old_requests(ctx, days)
        try:
            await asyncio.wait_for(stop.wait(), RETENTION_INTERVAL_SECONDS)
        except TimeoutError:
            pass


async def _purge_spent_budgets(ctx: AppContext) -> None:
    try:
        async with ctx.transaction() as uow:
            await policies.purge_spent_budgets(uow.policies, utcnow())
    except Exception:
        logger.exception("purging spent budget windows failed; retrying after the interval")


async def _purge_old_requests(ctx: AppContext, days: int) -> None:
    try:
        report = await purge(
            ctx.transaction, utcnow() - timedelta(days=days), sign=chain_signer(ctx)
        )
        if report.requests:
            logger.info("retention: purged %d requests older than %d days", report.requests, days)
    except Exception:
        logger.exception("retention purge failed; retrying after the interval")
