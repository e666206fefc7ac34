"""Sealing an org's waiting events now, in transactions of its own: the worker's loop,
``signoff audit seal``, and the export (which wants the chain complete and its head
signed) call these."""

from __future__ import annotations

import uuid

from signoff.audit import repository, service
from signoff.common.time import utcnow
from signoff.context import AppContext

ORGS_PER_ROUND = 100


def checkpoint_policy(ctx: AppContext) -> service.CheckpointPolicy:
    return service.CheckpointPolicy(
        ctx.settings.audit_checkpoint_events, ctx.settings.audit_checkpoint_seconds
    )


async def seal_once(ctx: AppContext, *, force_checkpoint: bool = False) -> int:
    """Seal every org's waiting events (one transaction per org and batch); how many."""
    await ctx.keys.ready()
    sign = ctx.keys.current.sign
    async with ctx.db.read_session() as session:
        orgs = await repository.orgs_with_unsealed(session, ORGS_PER_ROUND)
    sealed = 0
    for org_id in orgs:
        while True:
            async with ctx.db.write_transaction() as session:
                result = await service.seal_org(
                    session,
                    ctx.db.dialect,
                    org_id,
                    sign,
                    checkpoint_policy(ctx),
                    utcnow(),
                    force_checkpoint=force_checkpoint,
                )
            sealed += result.events
            if result.events < service.SEAL_BATCH:
                break
        async with ctx.db.write_transaction() as session:
            await service.verify_stored(session, org_id, utcnow())
    return sealed


async def seal_org_now(ctx: AppContext, org_id: uuid.UUID, *, checkpoint: bool) -> None:
    """Seal one org to its last event (an export or a purge wants the chain complete)."""
    await ctx.keys.ready()
    while True:
        async with ctx.db.write_transaction() as session:
            result = await service.seal_org(
                session,
                ctx.db.dialect,
                org_id,
                ctx.keys.current.sign,
                checkpoint_policy(ctx),
                utcnow(),
                force_checkpoint=checkpoint,
            )
        if result.events < service.SEAL_BATCH:
            return
