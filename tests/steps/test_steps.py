"""Approval chains (interface.md 4.7, decisions.md section 2) through the API."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import httpx
import pytest

from tests.conftest import Member, Org, assert_error, create_approval


async def set_chain(
    client: httpx.AsyncClient, who: Member, request_id: str, approvers: list[Member]
) -> list[dict[str, Any]]:
    response = await client.post(
        f"/api/v1/approvals/{request_id}/steps",
        headers=who.headers,
        json={
            "steps": [
                {"approver_id": a.user_id, "step_order": i} for i, a in enumerate(approvers, 1)
            ]
        },
    )
    assert response.status_code == 201, response.text
    steps: list[dict[str, Any]] = response.json()["data"]
    return steps


async def vote(
    client: httpx.AsyncClient,
    who: Member,
    request_id: str,
    step_id: str,
    decision: str = "approve",
    **extra: Any,
) -> httpx.Response:
    return await client.patch(
        f"/api/v1/approvals/{request_id}/steps/{step_id}",
        headers=who.headers,
        json={"decision": decision, **extra},
    )


async def test_configure_read_and_vote_a_parallel_chain(
    client: httpx.AsyncClient, org: Org
) -> None:
    request = await create_approval(client, org.admin)
    a, b = org.members[0], org.members[1]
    configured = await set_chain(client, org.admin, request["id"], [a, b])
    assert [s["step_order"] for s in configured] == [1, 2]
    assert {s["status"] for s in configured} == {"pending"}
    assert set(configured[0]) == {"id", "step_order", "approver_id", "status"}

    listed = (
        await client.get(f"/api/v1/approvals/{request['id']}/steps", headers=a.headers)
    ).json()
    assert [s["id"] for s in listed["data"]] == [s["id"] for s in configured]
    assert listed["data"][0]["approval_request_id"] == request["id"]
    assert listed["data"][0]["decided_at"] is None

    read = (await client.get(f"/api/v1/approvals/{request['id']}", headers=a.headers)).json()
    assert (read["required_approvals"], read["current_approvals"]) == (2, 0)

    second = await vote(client, b, request["id"], configured[1]["id"], comment="fine by me")
    assert second.status_code == 200, second.text
    assert second.json()["status"] == "approved"
    assert second.json()["decided_by"] == b.user_id
    assert second.json()["decided_at"] is not None
    assert second.json()["request_status"] == "pending"
    assert second.json()["current_approvals"] == 1

    first = await vote(client, a, request["id"], configured[0]["id"])
    assert first.json()["request_status"] == "approved"
    final = (await client.get(f"/api/v1/approvals/{request['id']}", headers=a.headers)).json()
    assert final["status"] == "approved"
    assert final["decided_by"] == a.user_id
    assert final["current_approvals"] == 2
    assert [s["status"] for s in final["steps"]] == ["approved", "approved"]
    assert [(v["user_id"], v["step_id"]) for v in final["votes"]] == [
        (b.user_id, configured[1]["id"]),
        (a.user_id, configured[0]["id"]),
    ]
    assert final["votes"][0]["comment"] == "fine by me"


async def test_sequential_chain_refuses_votes_out_of_turn(
    client: httpx.AsyncClient, org: Org
) -> None:
    request = await create_approval(client, org.admin, is_sequential=True)
    a, b = org.members[0], org.members[1]
    steps = await set_chain(client, org.admin, request["id"], [a, b])
    assert_error(await vote(client, b, request["id"], steps[1]["id"]), 409, "STEP_OUT_OF_ORDER")
    assert (await vote(client, a, request["id"], steps[0]["id"])).status_code == 200
    assert (await vote(client, b, request["id"], steps[1]["id"])).json()["request_status"] == (
        "approved"
    )


async def test_step_reject_rejects_the_request_and_skips_the_rest(
    client: httpx.AsyncClient, org: Org
) -> None:
    request = await create_approval(client, org.admin)
    a, b, c = org.members
    steps = await set_chain(client, org.admin, request["id"], [a, b, c])
    assert (await vote(client, a, request["id"], steps[0]["id"])).status_code == 200
    rejected = await vote(client, b, request["id"], steps[1]["id"], "reject", comment="no")
    assert rejected.json()["status"] == "rejected"
    assert rejected.json()["request_status"] == "rejected"
    chain = (await client.get(f"/api/v1/approvals/{request['id']}/steps", headers=a.headers)).json()
    assert [s["status"] for s in chain["data"]] == ["approved", "rejected", "skipped"]
    read = (await client.get(f"/api/v1/approvals/{request['id']}", headers=a.headers)).json()
    assert (read["status"], read["decided_by"], read["decision_comment"]) == (
        "rejected",
        b.user_id,
        "no",
    )
    details = assert_error(
        await vote(client, c, request["id"], steps[2]["id"]), 409, "REQUEST_NOT_PENDING"
    )
    assert details["status"] == "rejected"


async def test_who_may_vote(client: httpx.AsyncClient, org: Org) -> None:
    request = await create_approval(client, org.member)
    a, b = org.members[0], org.members[1]
    steps = await set_chain(client, org.member, request["id"], [a, b])
    assert_error(await vote(client, b, request["id"], steps[0]["id"]), 403, "FORBIDDEN")
    # An admin may vote any step.
    assert (await vote(client, org.admin, request["id"], steps[0]["id"])).status_code == 200
    details = assert_error(
        await vote(client, a, request["id"], steps[0]["id"]), 409, "STEP_NOT_PENDING"
    )
    assert details["status"] == "approved"
    assert_error(await vote(client, a, request["id"], str(uuid.uuid4())), 404, "NOT_FOUND")
    assert_error(await vote(client, a, request["id"], "not-a-uuid"), 404, "NOT_FOUND")
    assert_error(
        await vote(client, b, request["id"], steps[1]["id"], "maybe"), 400, "VALIDATION_ERROR"
    )


async def test_request_level_decisions_on_a_chain_are_admin_overrides(
    client: httpx.AsyncClient, org: Org
) -> None:
    request = await create_approval(client, org.member)
    a, b = org.members[0], org.members[1]
    steps = await set_chain(client, org.member, request["id"], [a, b])
    refused = await client.patch(
        f"/api/v1/approvals/{request['id']}", headers=a.headers, json={"decision": "approve"}
    )
    assert_error(refused, 403, "FORBIDDEN")
    assert (await vote(client, a, request["id"], steps[0]["id"])).status_code == 200
    forced = await client.patch(
        f"/api/v1/approvals/{request['id']}",
        headers=org.admin.headers,
        json={"decision": "approve", "comment": "urgent fix"},
    )
    assert forced.status_code == 200, forced.text
    assert (forced.json()["status"], forced.json()["decided_by"]) == ("approved", org.admin.user_id)
    chain = (await client.get(f"/api/v1/approvals/{request['id']}/steps", headers=a.headers)).json()
    assert [s["status"] for s in chain["data"]] == ["approved", "skipped"]
    events = (
        await client.get(f"/api/v1/approvals/{request['id']}/events", headers=a.headers)
    ).json()["data"]
    override = [e for e in events if e["type"] == "request.approved"]
    assert override and override[0]["data"]["override"] is True


@pytest.mark.parametrize(
    ("steps", "field"),
    [
        ([], "steps"),
        ([{"approver_id": "ME", "step_order": 0}], "steps.0.step_order"),
        ([{"approver_id": "ME", "step_order": -1}], "steps.0.step_order"),
        ([{"approver_id": "ME", "step_order": 1}, {"approver_id": "A", "step_order": 1}], "steps"),
        ([{"approver_id": "ME", "step_order": 1}, {"approver_id": "ME", "step_order": 2}], "steps"),
        ([{"approver_id": "not-a-uuid", "step_order": 1}], "steps.0.approver_id"),
        ([{"approver_id": "UNKNOWN", "step_order": 1}], "steps.0.approver_id"),
        ([{"approver_id": "FOREIGN", "step_order": 1}], "steps.0.approver_id"),
        ([{"step_order": 1}], "steps.0.approver_id"),
        ([{"approver_id": f"U{i}", "step_order": i + 1} for i in range(21)], "steps"),
    ],
)
async def test_invalid_chains_are_refused(
    client: httpx.AsyncClient, org: Org, other_org: Org, steps: list[dict[str, Any]], field: str
) -> None:
    names = {
        "ME": org.member.user_id,
        "A": org.admin.user_id,
        "UNKNOWN": str(uuid.uuid4()),
        "FOREIGN": other_org.member.user_id,
    }
    for step in steps:
        if "approver_id" in step:
            step["approver_id"] = names.get(step["approver_id"], step["approver_id"])
            if step["approver_id"].startswith("U"):
                step["approver_id"] = str(uuid.uuid4())
    request = await create_approval(client, org.member)
    response = await client.post(
        f"/api/v1/approvals/{request['id']}/steps",
        headers=org.member.headers,
        json={"steps": steps},
    )
    details = assert_error(response, 400, "VALIDATION_ERROR")
    assert field in [f["field"] for f in details["fields"]], details


async def test_chain_is_replaceable_until_someone_votes(
    client: httpx.AsyncClient, org: Org
) -> None:
    request = await create_approval(client, org.member)
    a, b = org.members[0], org.members[1]
    await set_chain(client, org.member, request["id"], [a, b])
    # Two steps made it need two approvals: only an admin may lower that to one.
    lowered = await client.post(
        f"/api/v1/approvals/{request['id']}/steps",
        headers=org.member.headers,
        json={"steps": [{"approver_id": b.user_id, "step_order": 1}]},
    )
    assert_error(lowered, 400, "VALIDATION_ERROR")
    replaced = await set_chain(client, org.admin, request["id"], [b])
    chain = (await client.get(f"/api/v1/approvals/{request['id']}/steps", headers=a.headers)).json()
    assert [s["id"] for s in chain["data"]] == [replaced[0]["id"]]
    read = (await client.get(f"/api/v1/approvals/{request['id']}", headers=a.headers)).json()
    assert read["required_approvals"] == 1
    assert (await vote(client, b, request["id"], replaced[0]["id"])).status_code == 200
    locked = await client.post(
        f"/api/v1/approvals/{request['id']}/steps",
        headers=org.member.headers,
        json={"steps": [{"approver_id": a.user_id, "step_order": 1}]},
    )
    assert_error(locked, 409, "REQUEST_NOT_PENDING")


async def test_votes_lock_the_chain(client: httpx.AsyncClient, org: Org) -> None:
    request = await create_approval(client, org.member, required_approvals=2)
    a, b = org.members[0], org.members[1]
    steps = await set_chain(client, org.member, request["id"], [a, b])
    assert (await vote(client, a, request["id"], steps[0]["id"])).status_code == 200
    locked = await client.post(
        f"/api/v1/approvals/{request['id']}/steps",
        headers=org.member.headers,
        json={"steps": [{"approver_id": b.user_id, "step_order": 1}]},
    )
    assert_error(locked, 409, "STEPS_LOCKED")


async def test_steps_of_terminal_or_foreign_requests(
    client: httpx.AsyncClient, org: Org, other_org: Org
) -> None:
    request = await create_approval(client, org.member)
    await client.delete(f"/api/v1/approvals/{request['id']}", headers=org.member.headers)
    body = {"steps": [{"approver_id": org.member.user_id, "step_order": 1}]}
    url = f"/api/v1/approvals/{request['id']}/steps"
    details = assert_error(
        await client.post(url, headers=org.member.headers, json=body), 409, "REQUEST_NOT_PENDING"
    )
    assert details["status"] == "cancelled"
    assert_error(await client.get(url, headers=other_org.member.headers), 404, "NOT_FOUND")
    assert_error(
        await client.post(url, headers=other_org.member.headers, json=body), 404, "NOT_FOUND"
    )


async def test_inbox_lists_what_waits_for_me_now(client: httpx.AsyncClient, org: Org) -> None:
    a, b = org.members[0], org.members[1]
    sequential = await create_approval(client, org.admin, title="sequential", is_sequential=True)
    seq_steps = await set_chain(client, org.admin, sequential["id"], [a, b])
    parallel = await create_approval(client, org.admin, title="parallel")
    await set_chain(client, org.admin, parallel["id"], [a, b])
    await create_approval(client, org.admin, title="count", required_approvals=2)
    voted = await create_approval(client, org.admin, title="voted", required_approvals=2)
    await client.patch(
        f"/api/v1/approvals/{voted['id']}", headers=b.headers, json={"decision": "approve"}
    )
    not_mine = await create_approval(client, org.admin, title="not mine")
    await set_chain(client, org.admin, not_mine["id"], [a])
    done = await create_approval(client, org.admin, title="done")
    await client.delete(f"/api/v1/approvals/{done['id']}", headers=org.admin.headers)

    async def inbox(who: Member) -> set[str]:
        response = await client.get("/api/v1/approvals?assigned_to=me", headers=who.headers)
        assert response.status_code == 200, response.text
        return {item["title"] for item in response.json()["data"]}

    assert await inbox(b) == {"parallel", "count"}
    assert await inbox(a) == {"sequential", "parallel", "count", "voted", "not mine"}
    # Once a has approved step 1, the sequential request moves into b's inbox.
    assert (await vote(client, a, sequential["id"], seq_steps[0]["id"])).status_code == 200
    assert await inbox(b) == {"sequential", "parallel", "count"}
    assert "sequential" not in await inbox(a)
    by_id = await client.get(f"/api/v1/approvals?assigned_to={b.user_id}", headers=a.headers)
    assert {i["title"] for i in by_id.json()["data"]} == {"sequential", "parallel", "count"}
    bad = await client.get("/api/v1/approvals?assigned_to=someone", headers=a.headers)
    assert_error(bad, 400, "VALIDATION_ERROR")


async def test_every_vote_and_step_change_is_audited(client: httpx.AsyncClient, org: Org) -> None:
    request = await create_approval(client, org.admin)
    a, b = org.members[0], org.members[1]
    steps = await set_chain(client, org.admin, request["id"], [a, b])
    await vote(client, a, request["id"], steps[0]["id"])
    await vote(client, b, request["id"], steps[1]["id"], "reject")
    events = (
        await client.get(f"/api/v1/approvals/{request['id']}/events", headers=a.headers)
    ).json()["data"]
    assert [e["type"] for e in events] == [
        "request.created",
        "steps.configured",
        "step.approved",
        "step.rejected",
        "request.rejected",
    ]
    assert events[2]["actor_id"] == a.user_id
    assert events[2]["data"]["step_id"] == steps[0]["id"]


async def test_parallel_votes_on_the_last_two_steps_approve_once(
    client: httpx.AsyncClient, org: Org
) -> None:
    for _ in range(5):
        request = await create_approval(client, org.admin)
        a, b = org.members[0], org.members[1]
        steps = await set_chain(client, org.admin, request["id"], [a, b])
        first, second = await asyncio.gather(
            vote(client, a, request["id"], steps[0]["id"]),
            vote(client, b, request["id"], steps[1]["id"]),
        )
        assert (first.status_code, second.status_code) == (200, 200)
        statuses = sorted([first.json()["request_status"], second.json()["request_status"]])
        assert statuses == ["approved", "pending"]
        events = (
            await client.get(f"/api/v1/approvals/{request['id']}/events", headers=a.headers)
        ).json()["data"]
        assert [e["type"] for e in events].count("request.approved") == 1
        read = (await client.get(f"/api/v1/approvals/{request['id']}", headers=a.headers)).json()
        assert (read["status"], read["current_approvals"]) == ("approved", 2)
