"""Sealing an org's waiting events now, in transactions of its own: the worker's loop,
``signoff audit seal``, and the export (which wants the chain complete and its head
signed) call these."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from typing import Any

from signoff.audit import repository, service
from signoff.common.time import utcnow
from signoff.context import AppContext

ORGS_PER_ROUND = 100
# Waiting events' ids read at once for an org (one sorted read a wake-up, not one a
# batch; each batch then reads its events by id).
WAKE_READ = 5000


def checkpoint_policy(ctx: AppContext) -> service.CheckpointPolicy:
    return service.CheckpointPolicy(
        ctx.settings.audit_checkpoint_events, ctx.settings.audit_checkpoint_seconds
    )


async def seal_once(ctx: AppContext, *, force_checkpoint: bool = False, verify: bool = True) -> int:
    """Seal every org's waiting events (one transaction per org and batch; on SQLite per
    batch of every org's), then, when ``verify``, re-check what is stored
    (``verify_once``); how many events were sealed."""
    if ctx.db.dialect == "sqlite":
        sealed = await _seal_in_commit_order(ctx, force_checkpoint)
        if verify:
            await verify_once(ctx)
        return sealed
    async with ctx.db.read_session() as session:
        orgs = await repository.orgs_with_unsealed(session, ORGS_PER_ROUND)
    sealed = 0
    for org_id in orgs:
        sealed += await seal_org_now(ctx, org_id, checkpoint=force_checkpoint)
    if verify:
        await verify_once(ctx)
    return sealed


async def verify_once(ctx: AppContext) -> int:
    """Re-hash every org's stored events after its verified mark, a page a read (the
    event loop is given back between pages), so writers never wait on the hashing; the
    mark is stored by a short write once ``VERIFY_MARK_EVERY`` events held, at a failure
    and at the end. How many events were checked."""
    async with ctx.db.read_session() as session:
        orgs = await service.orgs_to_verify(session, ORGS_PER_ROUND)
    checked = 0
    for org_id in orgs:
        held: service.Verified | None = None  # checked, not stored yet
        while True:
            async with ctx.db.read_session() as session:
                page = await service.check_stored(session, org_id, after=held)
            before = held.seq if held is not None else None
            if page is not None:
                held = page
            if held is None:
                break
            stuck = page is not None and page.seq == (page.from_seq if before is None else before)
            done = page is None or page.failed_seq is not None or stuck
            if not done and held.seq - held.from_seq < service.VERIFY_MARK_EVERY:
                await asyncio.sleep(0)
                continue
            async with ctx.db.write_transaction() as session:
                stored = await service.record_verified(session, org_id, held, utcnow())
            checked += held.seq - held.from_seq
            if not stored or done:
                break
            held = None
    return checked


async def _seal_in_commit_order(ctx: AppContext, force_checkpoint: bool) -> int:
    """SQLite: every org's events past the sealed mark, a batch a transaction, until none
    is left; how many were sealed. Nothing waiting is seen in a read: no write lock."""
    async with ctx.db.read_session() as session:
        if not await service.anything_to_seal(session):
            return 0
    await ctx.keys.ready()
    sealed = 0
    while True:
        async with ctx.db.write_transaction() as session:
            batch = await service.seal_in_commit_order(
                session,
                ctx.db.dialect,
                ctx.keys.current.sign,
                checkpoint_policy(ctx),
                utcnow(),
                force_checkpoint=force_checkpoint,
            )
        sealed += batch.events
        if not batch.more:
            return sealed


async def seal_org_now(ctx: AppContext, org_id: uuid.UUID, *, checkpoint: bool) -> int:
    """Seal one org to its last event (an export or a purge wants the chain complete):
    its waiting events' ids read in order once, then sealed a batch a transaction; how
    many events were sealed. On SQLite every org's waiting events are sealed (they come
    in one commit order), then the org's head signed if ``checkpoint``."""
    if ctx.db.dialect == "sqlite":
        sealed = await _seal_in_commit_order(ctx, force_checkpoint=False)
        if checkpoint:
            await ctx.keys.ready()
            await _seal_listed(ctx, org_id, (), checkpoint=True)  # the head signed
        return sealed
    await ctx.keys.ready()
    sealed = 0
    while True:
        async with ctx.db.read_session() as session:
            waiting = await repository.waiting_ids(session, org_id, WAKE_READ)
        size = service.batch_size(len(waiting))
        try:
            for start in range(0, max(len(waiting), 1), size):
                batch = waiting[start : start + size]
                sealed += await _seal_listed(ctx, org_id, batch, checkpoint=checkpoint)
        except service.StaleBatch:
            continue  # another sealer chained some of them: read what still waits
        if len(waiting) < WAKE_READ:
            return sealed


async def _seal_listed(
    ctx: AppContext, org_id: uuid.UUID, waiting: Sequence[Any], *, checkpoint: bool
) -> int:
    """Seal these listed events of the org (``service.seal_org``) in a transaction of its
    own; how many were sealed."""
    async with ctx.db.write_transaction() as session:
        result = await service.seal_org(
            session,
            ctx.db.dialect,
            org_id,
            ctx.keys.current.sign,
            checkpoint_policy(ctx),
            utcnow(),
            force_checkpoint=checkpoint,
            waiting=waiting,
        )
    return result.events
