"""Who may configure a request's approval chain (issue: hostile input, defect 2).

Steps may be configured by an org admin, or by the connection that created the request;
only an admin may configure fewer steps than the request's ``required_approvals``.
"""

from __future__ import annotations

from typing import Any

import httpx

from tests.conftest import Member, Org, assert_error, create_approval


async def configure(
    client: httpx.AsyncClient, who: Member, request_id: str, approvers: list[Member]
) -> httpx.Response:
    steps = [{"approver_id": a.user_id, "step_order": i} for i, a in enumerate(approvers, 1)]
    return await client.post(
        f"/api/v1/approvals/{request_id}/steps", headers=who.headers, json={"steps": steps}
    )


async def read(client: httpx.AsyncClient, who: Member, request_id: str) -> dict[str, Any]:
    response = await client.get(f"/api/v1/approvals/{request_id}", headers=who.headers)
    body: dict[str, Any] = response.json()
    return body


async def test_a_member_cannot_rewrite_another_request_into_their_own_one_step_chain(
    client: httpx.AsyncClient, org: Org
) -> None:
    creator, attacker = org.members[0], org.members[1]
    request = await create_approval(client, creator, required_approvals=3)
    hijack = await configure(client, attacker, request["id"], [attacker])
    assert_error(hijack, 403, "FORBIDDEN")
    # Even a chain that keeps the bar is not theirs to set.
    assert_error(await configure(client, attacker, request["id"], org.members), 403, "FORBIDDEN")
    approve = await client.patch(
        f"/api/v1/approvals/{request['id']}",
        headers=attacker.headers,
        json={"decision": "approve"},
    )
    assert approve.status_code == 200
    after = await read(client, attacker, request["id"])
    assert (after["status"], after["required_approvals"], after["steps"]) == ("pending", 3, [])


async def test_the_creating_connection_configures_steps_but_never_lowers_the_bar(
    client: httpx.AsyncClient, org: Org
) -> None:
    creator = org.members[0]
    request = await create_approval(client, creator, required_approvals=3)
    fewer = await configure(client, creator, request["id"], org.members[:2])
    details = assert_error(fewer, 400, "VALIDATION_ERROR")
    assert details["fields"][0]["field"] == "steps"
    assert (await read(client, creator, request["id"]))["required_approvals"] == 3
    same = await configure(client, creator, request["id"], org.members[:3])
    assert same.status_code == 201, same.text
    assert (await read(client, creator, request["id"]))["required_approvals"] == 3


async def test_an_admin_may_configure_any_chain_even_a_shorter_one(
    client: httpx.AsyncClient, org: Org
) -> None:
    request = await create_approval(client, org.members[0], required_approvals=3)
    shorter = await configure(client, org.admin, request["id"], [org.members[1]])
    assert shorter.status_code == 201, shorter.text
    assert (await read(client, org.admin, request["id"]))["required_approvals"] == 1


async def test_another_orgs_admin_sees_nothing(
    client: httpx.AsyncClient, org: Org, other_org: Org
) -> None:
    request = await create_approval(client, org.members[0])
    response = await configure(client, other_org.admin, request["id"], [other_org.admin])
    assert_error(response, 404, "NOT_FOUND")
