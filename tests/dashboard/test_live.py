"""The org-level live signal: in one process, and across processes on PostgreSQL."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from signoff.config import Settings
from signoff.context import AppContext
from signoff.wiring import Wiring


async def test_a_change_wakes_the_orgs_watchers_only(ctx: AppContext, wiring: Wiring) -> None:
    acme, globex = uuid.uuid4(), uuid.uuid4()
    with wiring.live.watch(acme) as acme_changed, wiring.live.watch(globex) as globex_changed:
        wiring.live.request_changed(acme)
        await asyncio.wait_for(acme_changed.wait(), 2)
        assert not globex_changed.is_set()


@pytest.mark.usefixtures("postgres_only")  # LISTEN/NOTIFY
async def test_postgres_carries_the_signal_across_processes(settings: Settings) -> None:
    listening, sending = Wiring.from_settings(settings), Wiring.from_settings(settings)
    org = uuid.uuid4()
    try:
        await listening.live.start_listening()
        with listening.live.watch(org) as changed:
            sending.live.request_changed(org)  # another replica's create or decision
            await asyncio.wait_for(changed.wait(), 2)
    finally:
        await sending.close()
        await listening.close()
