"""GET /api/v1/team/members and /api/v1/org/action-types: what pickers and filters are
filled from. Each answers for the caller's org only."""

from __future__ import annotations

import httpx

from signoff.context import AppContext
from tests.conftest import Org, assert_error, create_approval
from tests.oauth.support import grant, register_client


async def test_members_are_the_orgs_users(
    client: httpx.AsyncClient, org: Org, other_org: Org
) -> None:
    response = await client.get("/api/v1/team/members", headers=org.member.headers)
    assert response.status_code == 200, response.text
    expected = [
        {"id": who.user_id, "email": who.email, "full_name": who.name, "role": who.role}
        for who in (org.admin, *org.members)
    ]
    assert response.json() == {"data": expected}
    other = (await client.get("/api/v1/team/members", headers=other_org.admin.headers)).json()
    assert {member["email"] for member in other["data"]} == {
        other_org.admin.email,
        other_org.member.email,
    }


async def test_action_types_are_the_distinct_ones_in_use(
    client: httpx.AsyncClient, org: Org, other_org: Org
) -> None:
    assert (await client.get("/api/v1/org/action-types", headers=org.admin.headers)).json() == {
        "data": []
    }
    for action_type in ("deploy.production", "db.migrate", "deploy.production", None):
        await create_approval(client, org.member, action_type=action_type)
    await create_approval(client, other_org.member, action_type="billing.refund")

    response = await client.get("/api/v1/org/action-types", headers=org.admin.headers)
    assert response.status_code == 200, response.text
    assert response.json() == {"data": ["db.migrate", "deploy.production"]}
    other = await client.get("/api/v1/org/action-types", headers=other_org.member.headers)
    assert other.json() == {"data": ["billing.refund"]}


async def test_both_need_approvals_read(
    client: httpx.AsyncClient, ctx: AppContext, org: Org
) -> None:
    oauth_client = await register_client(ctx, org.admin)
    tokens = await grant(ctx, oauth_client, org.member, ("comments:write",))
    headers = {"Authorization": f"Bearer {tokens['access_token']}"}
    for path in ("/api/v1/team/members", "/api/v1/org/action-types"):
        assert_error(await client.get(path, headers=headers), 403, "INSUFFICIENT_SCOPE")
        assert_error(await client.get(path), 401, "UNAUTHORIZED")
