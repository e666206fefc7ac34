"""A decision voids its request's scheduled reminders (``cancel_scheduled``) only where
some may exist: a request whose create wrote no plan row (SQLite, an org known to have no
channel), that never opened steps nor asked again, has none, and its decision makes no
such statement (``effects.may_have_scheduled``, migration 0052). A channel committed after
the creating principal was read still gets the create's plan, and then its decision voids
what that plan scheduled."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid
from collections.abc import Collection
from datetime import datetime

import httpx
import pytest
from sqlalchemy import select

from signoff.context import AppContext
from signoff.models import ApprovalRequest
from signoff.notifications.planning.repository import PlanQueries
from signoff.wiring import Wiring
from tests.conftest import Org, create_approval
from tests.notifications.support import CHANNEL_MATCHING_NOTHING
from tests.notifications.test_created_plan_and_channel_presence import (
    _ADD_CHANNEL_ELSEWHERE,
    create_as,
    principal_of,
)
from tests.notifications.test_flow import put_routing


@pytest.fixture
def voided(monkeypatch: pytest.MonkeyPatch) -> list[uuid.UUID]:
    """The requests whose scheduled notifications a statement voided."""
    made: list[uuid.UUID] = []
    cancel = PlanQueries.cancel_scheduled

    async def counted(self: PlanQueries, request_ids: Collection[uuid.UUID], now: datetime) -> None:
        made.extend(request_ids)
        await cancel(self, request_ids, now)

    monkeypatch.setattr(PlanQueries, "cancel_scheduled", counted)
    return made


async def _planned(ctx: AppContext, request_id: str) -> bool:
    async with ctx.reading() as uow:
        flag = await uow.session.scalar(
            select(ApprovalRequest.notifications_planned).where(
                ApprovalRequest.id == uuid.UUID(request_id)
            )
        )
    return bool(flag)


async def _approve(api: httpx.AsyncClient, org: Org, request_id: str) -> None:
    response = await api.patch(
        f"/api/v1/approvals/{request_id}", headers=org.admin.headers, json={"decision": "approve"}
    )
    assert response.status_code == 200, response.text


@pytest.mark.parametrize("routed", [False, True], ids=["no-channel", "a-channel"])
async def test_a_decision_voids_reminders_only_where_a_plan_may_have_been_written(
    api: httpx.AsyncClient,
    ctx: AppContext,
    org: Org,
    backend: str,
    voided: list[uuid.UUID],
    routed: bool,
) -> None:
    if routed:
        await put_routing(api, org, CHANNEL_MATCHING_NOTHING)
    created = await create_approval(api, org.member)
    # PostgreSQL decides the plan inside its create's statement: always "may have".
    planned = routed or backend == "postgres"
    assert await _planned(ctx, created["id"]) == planned
    await _approve(api, org, created["id"])
    assert voided == ([uuid.UUID(created["id"])] if planned else [])


async def test_a_channel_added_elsewhere_after_the_principal_was_read_is_voided_too(
    api: httpx.AsyncClient, ctx: AppContext, wiring: Wiring, org: Org, voided: list[uuid.UUID]
) -> None:
    """The stale "no channel" of a principal read before another process committed the
    org's first channel: the create writes its plan all the same, and says so."""
    principal = await principal_of(wiring, org)
    assert not principal.org_has_channels
    argv = [sys.executable, "-c", _ADD_CHANNEL_ELSEWHERE, ctx.settings.database_url, org.id]
    await asyncio.to_thread(subprocess.run, argv, check=True, timeout=60)
    request_id = await create_as(ctx, principal)
    assert await _planned(ctx, request_id)
    await _approve(api, org, request_id)
    assert voided == [uuid.UUID(request_id)]
