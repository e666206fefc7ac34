"""The background sealer: new audit events into their org's hash chain (docs/audit.md)."""

from __future__ import annotations

import asyncio
import logging

from signoff.audit.sealing import seal_once
from signoff.context import AppContext

logger = logging.getLogger(__name__)


async def run_audit_sealer(ctx: AppContext, stop: asyncio.Event) -> None:
    interval = ctx.settings.audit_seal_interval_seconds
    while not stop.is_set():
        try:
            await seal_once(ctx)
        except Exception:
            logger.exception("audit sealing failed; retrying after the interval")
        try:
            await asyncio.wait_for(stop.wait(), interval)
        except TimeoutError:
            pass
