"""Standing approvals through the API, on SQLite and PostgreSQL: granted beside an
approval, matched at a later create (receipt, callback, audit), counted race-safely,
listed and revoked."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import update

from signoff.common.time import utcnow
from signoff.context import AppContext
from signoff.models import StandingApproval
from tests.conftest import Org, approval_body, assert_error, create_approval
from tests.standing.support import DEPLOY, GRANT, grant, org_events, request, standing_list

pytestmark = pytest.mark.anyio


async def test_a_grant_approves_later_matching_requests_at_once(
    client: httpx.AsyncClient, ctx: AppContext, org: Org
) -> None:
    requester, approver = org.members[0], org.admin
    sid = await grant(client, requester, approver)
    (listed,) = await standing_list(client, requester)
    assert listed["granted_by"] == {"id": approver.user_id, "name": approver.name}
    assert listed["uses"] == 0 and listed["max_uses"] is None
    assert listed["connection_id"] == requester.connection_id
    assert listed["action_type"] == "deploy.staging"
    assert listed["arguments"] == GRANT["arguments"]
    assert listed["expires_at"] is not None

    matched = await request(
        client,
        requester,
        arguments={"env": "staging", "replicas": 5},
        callback_url="http://127.0.0.1:9/h",
    )
    assert matched["status"] == "approved"
    assert matched["auto_approved"] is True
    assert matched["standing_approval_id"] == sid
    assert matched["decided_by"] is None
    assert sid in matched["decided_by_name"] and approver.name in matched["decided_by_name"]
    read = await client.get(f"/api/v1/approvals/{matched['id']}", headers=requester.headers)
    assert read.json()["standing_approval_id"] == sid
    assert read.json()["receipt_issued"] is True
    events = await client.get(
        f"/api/v1/approvals/{matched['id']}/events", headers=requester.headers
    )
    (approved,) = [e for e in events.json()["data"] if e["type"] == "request.approved"]
    assert approved["data"]["standing_approval"]["id"] == sid
    assert approved["data"]["standing_approval"]["uses"] == 1
    deliveries = await client.get(
        f"/api/v1/webhooks?request_id={matched['id']}", headers=org.admin.headers
    )
    assert deliveries.json()["data"], "the callback goes out as for a person's decision"
    (granted,) = await org_events(ctx, org.id, "standing_approval.granted")
    assert granted.data["standing_approval_id"] == sid
    assert granted.actor_id == uuid.UUID(approver.user_id)
    (listed,) = await standing_list(client, requester)
    assert listed["uses"] == 1


NOT_MATCHING: list[tuple[str, dict[str, Any]]] = [
    ("above the max", {"arguments": {"env": "staging", "replicas": 6}}),
    ("not equal", {"arguments": {"env": "production", "replicas": 1}}),
    ("argument missing", {"arguments": {"env": "staging"}}),
    ("a string for a max", {"arguments": {"env": "staging", "replicas": "3"}}),
    ("a boolean for an eq", {"arguments": {"env": True, "replicas": 1}}),
    ("another action type", {"action_type": "deploy.production"}),
    ("no action type", {"action_type": None}),
    ("critical", {"priority": "critical"}),
    ("a quorum", {"required_approvals": 2}),
]


@pytest.mark.parametrize(("case", "overrides"), NOT_MATCHING)
async def test_requests_it_does_not_cover_go_to_people(
    client: httpx.AsyncClient, org: Org, case: str, overrides: dict[str, Any]
) -> None:
    await grant(client, org.members[0], org.admin)
    created = await request(client, org.members[0], **overrides)
    assert created["status"] == "pending", case
    assert created["auto_approved"] is False and created["standing_approval_id"] is None
    (listed,) = await standing_list(client, org.admin)
    assert listed["uses"] == 0


async def test_another_connection_is_not_covered(client: httpx.AsyncClient, org: Org) -> None:
    await grant(client, org.members[0], org.admin)
    other = await request(client, org.members[1])
    assert other["status"] == "pending"


async def test_max_uses_then_people(client: httpx.AsyncClient, org: Org) -> None:
    await grant(client, org.members[0], org.admin, {"max_uses": 2})
    statuses = [(await request(client, org.members[0]))["status"] for _ in range(3)]
    assert statuses == ["approved", "approved", "pending"]
    assert await standing_list(client, org.admin) == [], "a used-up grant no longer stands"


async def test_an_expired_grant_approves_nothing(
    client: httpx.AsyncClient, ctx: AppContext, org: Org
) -> None:
    sid = await grant(client, org.members[0], org.admin)
    async with ctx.transaction() as uow:
        await uow.session.execute(
            update(StandingApproval)
            .where(StandingApproval.id == uuid.UUID(sid))
            .values(expires_at=utcnow() - timedelta(seconds=1))
        )
    assert (await request(client, org.members[0]))["status"] == "pending"
    assert await standing_list(client, org.admin) == []


async def test_an_idempotent_replay_takes_no_use(client: httpx.AsyncClient, org: Org) -> None:
    await grant(client, org.members[0], org.admin, {"max_uses": 2})
    first = await request(client, org.members[0], idempotency_key="k-1")
    again = await client.post(
        "/api/v1/approvals",
        json=approval_body(**DEPLOY, idempotency_key="k-1"),
        headers=org.members[0].headers,
    )
    assert again.json()["id"] == first["id"]
    (listed,) = await standing_list(client, org.admin)
    assert listed["uses"] == 1


async def test_twenty_concurrent_creates_use_five_uses_exactly(
    client: httpx.AsyncClient, org: Org
) -> None:
    await grant(client, org.members[0], org.admin, {"max_uses": 5})

    async def one() -> str:
        created = await request(client, org.members[0])
        return str(created["status"])

    statuses = await asyncio.gather(*(one() for _ in range(20)))
    assert statuses.count("approved") == 5
    assert statuses.count("pending") == 15
    assert await standing_list(client, org.admin) == []


async def test_revoking(client: httpx.AsyncClient, ctx: AppContext, org: Org) -> None:
    requester, grantor, stranger = org.members
    sid = await grant(client, requester, grantor)
    refused = await client.delete(f"/api/v1/standing-approvals/{sid}", headers=stranger.headers)
    assert_error(refused, 403, "FORBIDDEN")
    assert_error(
        await client.delete(f"/api/v1/standing-approvals/{uuid.uuid4()}", headers=grantor.headers),
        404,
        "NOT_FOUND",
    )
    assert_error(
        await client.delete("/api/v1/standing-approvals/nope", headers=grantor.headers),
        404,
        "NOT_FOUND",
    )
    revoked = await client.delete(f"/api/v1/standing-approvals/{sid}", headers=grantor.headers)
    assert revoked.status_code == 200, revoked.text
    assert revoked.json()["revoked_at"] is not None
    assert (await request(client, requester))["status"] == "pending"
    assert await standing_list(client, grantor) == []
    # An admin may revoke anyone's; a second revoke changes nothing.
    other = await grant(client, requester, grantor)
    by_admin = await client.delete(f"/api/v1/standing-approvals/{other}", headers=org.admin.headers)
    assert by_admin.status_code == 200
    again = await client.delete(f"/api/v1/standing-approvals/{other}", headers=org.admin.headers)
    assert again.status_code == 200
    events = await org_events(ctx, org.id, "standing_approval.revoked")
    assert [e.data["standing_approval_id"] for e in events] == [sid, other]
    assert events[1].actor_id == uuid.UUID(org.admin.user_id)


async def test_other_orgs_see_and_revoke_nothing(
    client: httpx.AsyncClient, org: Org, other_org: Org
) -> None:
    sid = await grant(client, org.members[0], org.admin)
    assert await standing_list(client, other_org.admin) == []
    refused = await client.delete(
        f"/api/v1/standing-approvals/{sid}", headers=other_org.admin.headers
    )
    assert_error(refused, 404, "NOT_FOUND")
    created = await create_approval(
        client, other_org.member, action_type="deploy.staging", arguments={"env": "staging"}
    )
    assert created["status"] == "pending"
