"""Sealing an org's waiting events now, in transactions of its own: the worker's loop,
``signoff audit seal``, and the export (which wants the chain complete and its head
signed) call these."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from typing import Any

from signoff.audit import repository, service
from signoff.common.poison import PoisonedRows
from signoff.common.time import utcnow
from signoff.context import AppContext

ORGS_PER_ROUND = 100
# An org held back (one of its events could not be sealed) is tried again after this
# long by the worker's loop: a fix takes effect soon, and a failure that was not the
# org's own (the database away) holds back the orgs it hit no longer than this.
RETRY_HELD_BACK_SECONDS = 60.0
# Waiting events' ids read at once for an org (one sorted read a wake-up, not one a
# batch; each batch then reads its events by id).
WAKE_READ = 5000


def checkpoint_policy(ctx: AppContext) -> service.CheckpointPolicy:
    return service.CheckpointPolicy(
        ctx.settings.audit_checkpoint_events, ctx.settings.audit_checkpoint_seconds
    )


def held_back_orgs() -> PoisonedRows:
    """Where a sealer keeps the orgs it holds back (``service.Unsealable``) between its
    batches, or, the worker's, between its rounds."""
    return PoisonedRows(retry_after_seconds=RETRY_HELD_BACK_SECONDS)


async def seal_once(
    ctx: AppContext,
    *,
    force_checkpoint: bool = False,
    verify: bool = True,
    poisoned: PoisonedRows | None = None,
) -> int:
    """Seal every org's waiting events (one transaction per org and batch; on SQLite per
    batch of every org's), then, when ``verify``, re-check what is stored
    (``verify_once``); how many events were sealed. An org whose events cannot be sealed
    is logged and held back in ``poisoned`` (a new one: for this call) while the other
    orgs are sealed."""
    poisoned = held_back_orgs() if poisoned is None else poisoned
    if ctx.db.dialect == "sqlite":
        sealed = await _seal_in_commit_order(ctx, force_checkpoint, poisoned)
        if verify:
            await verify_once(ctx)
        return sealed
    async with ctx.db.read_session() as session:
        parked = poisoned.parked(service.SEAL_JOB)
        orgs = await repository.orgs_with_unsealed(session, ORGS_PER_ROUND, parked)
    sealed = 0
    for org_id in orgs:
        try:
            sealed += await seal_org_now(ctx, org_id, checkpoint=force_checkpoint)
        except Exception as error:  # one org's bad event must not hold every other chain
            poisoned.park(service.SEAL_JOB, org_id, service.held_back(org_id, error))
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


async def _seal_in_commit_order(
    ctx: AppContext, force_checkpoint: bool, poisoned: PoisonedRows
) -> int:
    """SQLite: every org's events past the sealed mark, a batch a transaction, until none
    is left (but those of the orgs held back in ``poisoned``); how many were sealed.
    Nothing waiting is seen in a read: no write lock."""
    async with ctx.db.read_session() as session:
        if not await service.anything_to_seal(session, poisoned.parked(service.SEAL_JOB)):
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
                poisoned=poisoned,
                force_checkpoint=force_checkpoint,
            )
        sealed += batch.events
        if not batch.more:
            return sealed


async def seal_org_now(ctx: AppContext, org_id: uuid.UUID, *, checkpoint: bool) -> int:
    """Seal one org to its last event (an export or a purge wants the chain complete):
    its waiting events' ids read in order once, then sealed a batch a transaction; how
    many events were sealed. On SQLite every org's waiting events are sealed (they come
    in one commit order), then the org's head signed if ``checkpoint``. Raises when one
    of the org's events cannot be sealed (on SQLite ``service.Unsealable``): its chain
    cannot be made complete."""
    if ctx.db.dialect == "sqlite":
        poisoned = held_back_orgs()
        sealed = await _seal_in_commit_order(ctx, False, poisoned)
        if org_id in poisoned.parked(service.SEAL_JOB):
            raise service.Unsealable(org_id, None, "held back")
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
