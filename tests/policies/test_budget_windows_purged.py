"""Spent budget windows are forgotten by the worker's hourly retention round, whether or
not SIGNOFF_RETENTION_DAYS is set; the windows creates still spend in are kept, and so is
what they have spent. Both databases."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

import pytest
from sqlalchemy import func, select

from signoff.common.time import utcnow
from signoff.context import AppContext
from signoff.models import PolicyBudgetUsage
from signoff.policies import service as policies
from signoff.retention import service as retention
from tests.conftest import Org

pytestmark = pytest.mark.anyio


async def _spend(ctx: AppContext, org: Org, hours_ago: float) -> None:
    start = (utcnow() - timedelta(hours=hours_ago)).replace(minute=0, second=0, microsecond=0)
    async with ctx.transaction() as uow:
        spent = await uow.policies.spend(uuid.UUID(org.id), "refunds", "org", start, 5.0, 10, 1e9)
        assert spent


async def _windows(ctx: AppContext) -> int:
    async with ctx.reading() as uow:
        return int(await uow.session.scalar(select(func.count()).select_from(PolicyBudgetUsage)))


async def test_windows_older_than_two_days_are_purged(ctx: AppContext, org: Org) -> None:
    for hours_ago in (0, 30, 47, 49, 24 * 10):
        await _spend(ctx, org, hours_ago)
    async with ctx.transaction() as uow:
        deleted = await policies.purge_spent_budgets(uow.policies, utcnow())
    assert deleted == 2
    assert await _windows(ctx) == 3
    # What the current window spent is untouched: it goes on counting from there.
    await _spend(ctx, org, 0)
    async with ctx.reading() as uow:
        counts = (await uow.session.execute(select(PolicyBudgetUsage.count))).scalars().all()
    assert sorted(counts) == [1, 1, 2]


async def test_the_worker_purges_without_a_retention_setting(ctx: AppContext, org: Org) -> None:
    assert ctx.settings.retention_days is None
    await _spend(ctx, org, 24 * 5)
    stop = asyncio.Event()
    task = asyncio.create_task(retention.run_retention(ctx, stop))
    for _ in range(100):
        if await _windows(ctx) == 0:
            break
        await asyncio.sleep(0.05)
    stop.set()
    await task
    assert await _windows(ctx) == 0
