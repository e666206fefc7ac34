"""Readiness and the values ``/metrics`` reads from the database at scrape time."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from sqlalchemy.ext.asyncio import AsyncEngine

from signoff.common.time import utcnow
from signoff.context import AppContext
from signoff.errors import ServiceUnavailable
from signoff.operations.repository import OperationsRepository
from signoff.ratelimit.limiter import RateLimiter

logger = logging.getLogger(__name__)


@lru_cache(maxsize=1)
def _head_revisions() -> frozenset[str]:
    # Reading the migration scripts takes milliseconds: once per process.
    from signoff.migrations import head_revisions

    return head_revisions()


async def check_ready(
    ctx: AppContext, limiter: RateLimiter, background: Sequence[asyncio.Task[None]]
) -> None:
    """Raise ``ServiceUnavailable`` unless this process can do its work: the database
    answers and is at the latest migration, Redis answers (when configured), and the
    background loops it runs (sweep, delivery worker) are still running."""
    try:
        async with ctx.reading() as uow:
            revisions = await OperationsRepository(uow.session).schema_revisions()
    except Exception as exc:
        logger.warning("readiness: database unreachable: %s", exc)
        raise ServiceUnavailable("The database is not reachable.") from None
    if revisions != _head_revisions():
        raise ServiceUnavailable(
            "The database schema is not at the latest migration; run `signoff db upgrade`.",
            {"database": sorted(revisions), "expected": sorted(_head_revisions())},
        )
    if ctx.settings.redis_url and not await limiter.check_ready():
        raise ServiceUnavailable("Redis is not reachable.")
    stopped = [task.get_name() for task in background if task.done()]
    if stopped:
        raise ServiceUnavailable("A background loop has stopped.", {"stopped": stopped})


@dataclass(frozen=True)
class PoolUse:
    engine: str  # "read" and "write" on SQLite, "shared" on PostgreSQL
    size: int
    checked_out: int
    overflow: int


@dataclass(frozen=True)
class ScrapeSnapshot:
    deliveries_pending: int
    deliveries_due: int
    expiry_lag_seconds: float
    long_polls_waiting: int
    pools: list[PoolUse]


def _pool_use(name: str, engine: AsyncEngine) -> PoolUse:
    pool = engine.sync_engine.pool
    return PoolUse(
        name,
        int(getattr(pool, "size", lambda: 0)()),
        int(getattr(pool, "checkedout", lambda: 0)()),
        max(0, int(getattr(pool, "overflow", lambda: 0)())),
    )


async def read_snapshot(ctx: AppContext, long_polls_waiting: int) -> ScrapeSnapshot:
    now = utcnow()
    async with ctx.reading() as uow:
        repo = OperationsRepository(uow.session)
        pending, due = await repo.delivery_queue(now)
        oldest = await repo.oldest_overdue_expiry(now)
    db = ctx.db
    pools = (
        [_pool_use("read", db.read_engine), _pool_use("write", db.write_engine)]
        if db.write_engine is not db.read_engine
        else [_pool_use("shared", db.read_engine)]
    )
    return ScrapeSnapshot(
        deliveries_pending=pending,
        deliveries_due=due,
        expiry_lag_seconds=0.0 if oldest is None else max(0.0, (now - oldest).total_seconds()),
        long_polls_waiting=long_polls_waiting,
        pools=pools,
    )
