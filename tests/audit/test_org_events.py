"""Changes to the org itself join its hash chain, on both databases: policy versions
(saved, restored), routing, emergency stops, connections (created, rotated, revoked,
transferred, rate limit changed), users (invited, role changed, deactivated,
reactivated), org settings and passkeys. Each is written in the change's transaction,
exported and verified like any request's event."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta
from typing import Any

import httpx
import pytest

from signoff.audit import chain
from signoff.audit.sealing import seal_org_now
from signoff.audit.service import export_records
from signoff.common.time import utcnow
from signoff.context import AppContext
from signoff.dashboard import admin_service
from signoff.orgs import service as orgs_service
from signoff.passkeys import service as passkeys
from tests.conftest import Org
from tests.passkeys.test_passkey_decisions import member_of, with_passkey

pytestmark = pytest.mark.anyio


async def _exported(ctx: AppContext, org: Org) -> list[dict[str, Any]]:
    await seal_org_now(ctx, uuid.UUID(org.id), checkpoint=True)
    return [r async for r in export_records(ctx.db.read_session, uuid.UUID(org.id), 1)]


async def _through_the_api(client: httpx.AsyncClient, org: Org) -> None:
    headers = org.admin.headers
    for method, path, body in (
        ("PUT", "/api/v1/policies", {"rules": []}),
        ("POST", "/api/v1/policies/versions/1/restore", None),
        ("PUT", "/api/v1/routing", {"channels": {}, "rules": []}),
        ("PUT", "/api/v1/emergency-stop", {"active": True}),
        ("PUT", "/api/v1/emergency-stop", {"active": False}),
        ("PATCH", "/api/v1/org/settings", {"passkey_for": "critical"}),
    ):
        answer = await client.request(method, path, json=body, headers=headers)
        assert answer.status_code in (200, 201), (path, answer.text)


async def _through_the_services(ctx: AppContext, org: Org) -> None:
    admin = await member_of(ctx, org.admin)
    now = utcnow()
    async with ctx.transaction() as uow:
        owner = await uow.orgs.find_user(admin.user_id)
        assert owner is not None
        issued = await orgs_service.create_connection(
            uow.orgs, ctx.box, ctx.settings, admin.org_id,
            owner=owner, name="Deploy bot", rate_limit=None, now=now, by=admin.user_id,
        )  # fmt: skip
        connection = issued.connection
        await orgs_service.rotate_webhook_secret(
            connection, ctx.box, timedelta(hours=1), now, admin.user_id
        )
        await orgs_service.revoke_connection(connection, now, admin.user_id)
        invited = await orgs_service.create_user(
            uow.orgs, admin.org_id, email="new@example.com", name="New", role="member",
            password=None, now=now, by=admin.user_id,
        )  # fmt: skip
    async with ctx.transaction() as uow:
        await admin_service.change_role(uow, admin, str(invited.id), "admin")
    async with ctx.transaction() as uow:
        await admin_service.deactivate_user(uow, admin, str(invited.id), utcnow())
    await with_passkey(ctx, org, org.admin)
    async with ctx.transaction() as uow:
        (key,) = await uow.passkeys.list_for_user(admin.user_id)
        await passkeys.remove(uow.passkeys, admin, key.id, utcnow())


async def test_org_changes_are_chained_exported_and_verified(
    ctx: AppContext, client: httpx.AsyncClient, org: Org
) -> None:
    setup = len([r for r in await _exported(ctx, org) if r["kind"] == "event"])
    await _through_the_api(client, org)
    await _through_the_services(ctx, org)
    records = await _exported(ctx, org)
    events = [r for r in records if r["kind"] == "event"][setup:]
    assert [e["type"] for e in events] == [
        "policy.saved",
        "policy.restored",
        "routing.saved",
        "emergency_stop.on",
        "emergency_stop.off",
        "org.settings_changed",
        "connection.created",
        "connection.rotated",
        "connection.revoked",
        "user.invited",
        "user.role_changed",
        "user.deactivated",
        "passkey.removed",
    ]
    assert all(e["request_id"] is None for e in events)
    assert {e["actor_id"] for e in events} == {org.admin.user_id}
    assert events[1]["data"] == {"version": 2, "restored_from": 1}
    assert events[5]["data"] == {"passkey_for": "critical"}
    assert events[10]["data"]["role"] == "admin"
    # No secret of the connection is in the trail.
    assert set(events[6]["data"]) == {"connection_id", "name"}
    lines = [json.dumps(r) for r in records]
    result = chain.verify(chain.parse_lines(lines), None)
    assert result.ok, result.problem


async def test_an_org_event_changed_later_is_named(
    ctx: AppContext, client: httpx.AsyncClient, org: Org
) -> None:
    await _through_the_api(client, org)
    records = await _exported(ctx, org)
    stop = next(r for r in records if r.get("type") == "emergency_stop.on")
    stop["actor_id"] = str(uuid.uuid4())  # a forged line: someone else turned it on
    result = chain.verify(chain.parse_lines(json.dumps(r) for r in records), None)
    assert (result.ok, result.problem) == (False, f"event #{stop['seq']} was changed")


async def test_transfers_rate_limits_and_reactivations_are_chained(
    ctx: AppContext, client: httpx.AsyncClient, org: Org
) -> None:
    admin = await member_of(ctx, org.admin)
    setup = len([r for r in await _exported(ctx, org) if r["kind"] == "event"])
    async with ctx.transaction() as uow:
        owner = await uow.orgs.find_user(admin.user_id)
        assert owner is not None
        issued = await orgs_service.create_connection(
            uow.orgs, ctx.box, ctx.settings, admin.org_id,
            owner=owner, name="Deploy bot", rate_limit=100, now=utcnow(), by=admin.user_id,
        )  # fmt: skip
        invited = await orgs_service.create_user(
            uow.orgs, admin.org_id, email="heir@example.com", name="Heir", role="member",
            password=None, now=utcnow(), by=admin.user_id,
        )  # fmt: skip
    connection_id = str(issued.connection.id)
    async with ctx.transaction() as uow:
        await admin_service.set_rate_limit(uow, ctx.settings, admin, connection_id, "250")
        # The same value again changes nothing, and records nothing.
        await admin_service.set_rate_limit(uow, ctx.settings, admin, connection_id, "250")
    async with ctx.transaction() as uow:
        await admin_service.transfer_connection(uow, admin, connection_id, str(invited.id))
    async with ctx.transaction() as uow:
        await admin_service.deactivate_user(uow, admin, str(invited.id), utcnow())
    async with ctx.transaction() as uow:
        await admin_service.reactivate_user(uow, admin, str(invited.id))
        # Reactivating an active user records nothing.
        await admin_service.reactivate_user(uow, admin, str(invited.id))
    records = await _exported(ctx, org)
    events = [r for r in records if r["kind"] == "event"][setup:]
    assert [e["type"] for e in events] == [
        "connection.created",
        "user.invited",
        "connection.rate_limit_changed",
        "connection.transferred",
        "user.deactivated",
        "user.reactivated",
    ]
    assert events[2]["data"] == {"connection_id": connection_id, "from": 100, "to": 250}
    assert events[3]["data"] == {
        "connection_id": connection_id,
        "from_owner_id": org.admin.user_id,
        "to_owner_id": str(invited.id),
    }
    assert events[5]["data"] == {"user_id": str(invited.id)}
    assert {e["actor_id"] for e in events} == {org.admin.user_id}
    result = chain.verify(chain.parse_lines(json.dumps(r) for r in records), None)
    assert result.ok, result.problem


async def test_a_transfer_through_the_api_names_the_admin(
    ctx: AppContext, client: httpx.AsyncClient, org: Org
) -> None:
    heir = next(m for m in org.members if m.user_id != org.member.user_id)
    connection_id = org.member.connection_id
    answer = await client.post(
        f"/api/v1/connections/{connection_id}/transfer",
        json={"owner_id": heir.user_id},
        headers=org.admin.headers,
    )
    assert answer.status_code == 200, answer.text
    events = [r for r in await _exported(ctx, org) if r.get("type") == "connection.transferred"]
    assert [(e["actor_id"], e["data"]["to_owner_id"]) for e in events] == [
        (org.admin.user_id, heir.user_id)
    ]
