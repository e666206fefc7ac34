"""A SQLite create of an org without a channel writes no "created" plan statement: its
principal says the org has none (``Principal.org_has_channels``). That principal was
read before the create's write, so a channel committed in between, by another process or
by this one, must still get its plan (``storage.channel_presence``)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from typing import Any

import httpx
import pytest

from signoff.approvals import service as approvals_service
from signoff.approvals.schemas import CreateApprovalRequest
from signoff.auth.principal import Principal
from signoff.common.time import utcnow
from signoff.context import AppContext
from signoff.notifications.planning.repository import PlanQueries
from signoff.storage import channel_presence
from signoff.wiring import Wiring
from tests.conftest import Org, approval_body, create_approval
from tests.notifications.support import CHANNEL_MATCHING_NOTHING
from tests.notifications.test_flow import put_routing
from tests.notifications.test_plans_where_routing_can_send import plan_rows


def plan_statements(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The plan statements made (``PlanQueries.add_plan``), by kind."""
    made: list[str] = []
    add_plan = PlanQueries.add_plan

    async def counted(self: PlanQueries, org_id: Any, request_id: Any, kind: str, *a: Any) -> None:
        made.append(kind)
        await add_plan(self, org_id, request_id, kind, *a)

    monkeypatch.setattr(PlanQueries, "add_plan", counted)
    return made


async def principal_of(wiring: Wiring, org: Org) -> Principal:
    principal = await wiring.callers.authenticate(org.admin.api_key)
    assert principal is not None
    return principal


async def create_as(ctx: AppContext, principal: Principal) -> str:
    payload = CreateApprovalRequest.model_validate(approval_body())
    async with ctx.transaction() as uow:
        result = await approvals_service.create_request(uow, principal, payload, ctx.box, utcnow())
    return str(result.request.id)


@pytest.mark.parametrize("routed", [False, True], ids=["no-channel", "a-channel"])
async def test_a_create_makes_the_plan_statement_only_where_the_org_has_a_channel(
    api: httpx.AsyncClient,
    ctx: AppContext,
    org: Org,
    backend: str,
    monkeypatch: pytest.MonkeyPatch,
    routed: bool,
) -> None:
    if routed:
        await put_routing(api, org, CHANNEL_MATCHING_NOTHING)
    made = plan_statements(monkeypatch)
    created = await create_approval(api, org.admin)
    assert await plan_rows(ctx, created["id"]) == int(routed)
    # PostgreSQL writes the plan inside the create's one statement, never apart.
    assert made == (["created"] if routed and backend == "sqlite" else [])


_ADD_CHANNEL_ELSEWHERE = textwrap.dedent(
    """
    import asyncio, sys, uuid
    from signoff.common.time import utcnow
    from signoff.models.notifications import NotificationChannel
    from signoff.storage import Database

    async def main(url: str, org_id: str) -> None:
        db = Database(url)
        try:
            async with db.write_transaction() as session:
                now = utcnow()
                session.add(NotificationChannel(
                    id=uuid.uuid4(), org_id=uuid.UUID(org_id), name="mail", type="email",
                    config_encrypted="unused", created_at=now, updated_at=now,
                ))
        finally:
            await db.dispose()

    asyncio.run(main(sys.argv[1], sys.argv[2]))
    """
)


async def test_a_channel_another_process_adds_after_the_principal_was_read_gets_its_plan(
    ctx: AppContext, wiring: Wiring, org: Org
) -> None:
    """Another replica (or a CLI) commits the org's first channel between the read of the
    principal and the create's write: the create writes its plan all the same."""
    principal = await principal_of(wiring, org)
    assert not principal.org_has_channels
    argv = [sys.executable, "-c", _ADD_CHANNEL_ELSEWHERE, ctx.settings.database_url, org.id]
    await asyncio.to_thread(subprocess.run, argv, check=True, timeout=60)
    request_id = await create_as(ctx, principal)
    assert await plan_rows(ctx, request_id) == 1


async def test_a_channel_this_process_adds_after_the_principal_was_read_gets_its_plan(
    api: httpx.AsyncClient, ctx: AppContext, wiring: Wiring, org: Org
) -> None:
    principal = await principal_of(wiring, org)
    assert not principal.org_has_channels
    await put_routing(api, org, CHANNEL_MATCHING_NOTHING)
    request_id = await create_as(ctx, principal)
    assert await plan_rows(ctx, request_id) == 1
    # Read afresh, the principal knows of the channel.
    assert (await principal_of(wiring, org)).org_has_channels


def test_a_principal_read_while_a_channel_is_written_is_never_trusted() -> None:
    """Read between a channel's write and its commit, a principal may not see the channel
    although a create after the commit must: nothing read before the commit is trusted."""
    before = channel_presence.epoch()
    assert channel_presence.unchanged_since(before)
    channel_presence.channel_written()
    during = channel_presence.epoch()
    assert not channel_presence.unchanged_since(before)
    assert not channel_presence.unchanged_since(during)
    channel_presence.transaction_ended()
    assert not channel_presence.unchanged_since(before)
    assert not channel_presence.unchanged_since(during)
    after = channel_presence.epoch()
    assert channel_presence.unchanged_since(after)
    assert not channel_presence.unchanged_since(-1)  # principals read elsewhere
