"""The background sealer: new audit events into their org's hash chain (docs/audit.md)."""

from __future__ import annotations

import asyncio
import logging

from signoff.audit.sealing import held_back_orgs, seal_once
from signoff.context import AppContext

logger = logging.getLogger(__name__)


async def run_audit_sealer(ctx: AppContext, stop: asyncio.Event) -> None:
    """Seal every ``audit_seal_interval_seconds``; re-check the stored chain every
    ``audit_verify_interval_seconds`` (a re-check right after sealing would only hash
    again what was just hashed)."""
    interval = ctx.settings.audit_seal_interval_seconds
    loop = asyncio.get_running_loop()
    verify_at = loop.time()
    poisoned = held_back_orgs()  # tried again a while after, not every round
    while not stop.is_set():
        try:
            verify = loop.time() >= verify_at
            await seal_once(ctx, verify=verify, poisoned=poisoned)
            if verify:
                verify_at = loop.time() + ctx.settings.audit_verify_interval_seconds
        except Exception:
            logger.exception("audit sealing failed; retrying after the interval")
        try:
            await asyncio.wait_for(stop.wait(), interval)
        except TimeoutError:
            pass
