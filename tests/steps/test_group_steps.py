"""Chain steps that name a group and a quorum of its members (issue 36, "Groups and
quorum"), on SQLite and PostgreSQL: any N distinct members approve the step, one reject
ends the request, parallel and sequential chains, who may vote, and what is refused."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from signoff.context import AppContext
from tests.conftest import Member, Org, assert_error, create_approval, create_org
from tests.steps.test_steps import vote

pytestmark = pytest.mark.anyio


@pytest.fixture
async def big_org(ctx: AppContext) -> Org:
    """An admin and six members: finance holds the first three, security the fourth."""
    return await create_org(ctx, "Initech", members=6)


async def make_group(client: httpx.AsyncClient, org: Org, name: str, members: list[Member]) -> str:
    response = await client.post(
        "/api/v1/groups",
        json={"name": name, "member_ids": [m.user_id for m in members]},
        headers=org.admin.headers,
    )
    assert response.status_code == 201, response.text
    group_id: str = response.json()["id"]
    return group_id


async def set_steps(
    client: httpx.AsyncClient, who: Member, request_id: str, steps: list[dict[str, Any]]
) -> httpx.Response:
    return await client.post(
        f"/api/v1/approvals/{request_id}/steps", headers=who.headers, json={"steps": steps}
    )


async def one_group_step(
    client: httpx.AsyncClient, org: Org, group_id: str, **step: Any
) -> tuple[str, dict[str, Any]]:
    """A new request whose chain is one step of the group (``step``: e.g. its
    ``required_approvals``): the request's id and the step as configured."""
    request = await create_approval(client, org.admin, title="Pay the invoice")
    made = await set_steps(
        client, org.admin, request["id"], [{"group_id": group_id, "step_order": 1, **step}]
    )
    assert made.status_code == 201, made.text
    (configured,) = made.json()["data"]
    return request["id"], configured


async def status_of(client: httpx.AsyncClient, who: Member, request_id: str) -> str:
    response = await client.get(f"/api/v1/approvals/{request_id}", headers=who.headers)
    status: str = response.json()["status"]
    return status


async def test_two_of_finance_approves_at_the_second_distinct_member(
    client: httpx.AsyncClient, big_org: Org
) -> None:
    finance = big_org.members[:3]
    group_id = await make_group(client, big_org, "Finance", finance)
    request_id, step = await one_group_step(client, big_org, group_id, required_approvals=2)
    request = {"id": request_id}
    assert step["approver_id"] is None
    assert (step["group_id"], step["group_name"]) == (group_id, "Finance")
    assert (step["required_approvals"], step["current_approvals"]) == (2, 0)

    first = await vote(client, finance[0], request["id"], step["id"])
    assert first.status_code == 200, first.text
    body = first.json()
    assert (body["status"], body["request_status"]) == ("pending", "pending")
    assert (body["step_current_approvals"], body["step_required_approvals"]) == (1, 2)

    again = await vote(client, finance[0], request["id"], step["id"])
    assert_error(again, 409, "ALREADY_VOTED")

    second = await vote(client, finance[1], request["id"], step["id"])
    assert second.status_code == 200, second.text
    assert (second.json()["status"], second.json()["request_status"]) == ("approved", "approved")
    listed = await client.get(
        f"/api/v1/approvals/{request['id']}/steps", headers=big_org.admin.headers
    )
    (shown,) = listed.json()["data"]
    assert (shown["current_approvals"], shown["status"], shown["group_name"]) == (
        2,
        "approved",
        "Finance",
    )
    read = await client.get(f"/api/v1/approvals/{request['id']}", headers=big_org.admin.headers)
    assert read.json()["steps"][0]["group_id"] == group_id
    assert {v["user_id"] for v in read.json()["votes"]} == {finance[0].user_id, finance[1].user_id}
    late = await vote(client, finance[2], request["id"], step["id"])
    assert late.status_code == 409, late.text


async def test_one_reject_by_a_member_rejects(client: httpx.AsyncClient, big_org: Org) -> None:
    finance = big_org.members[:3]
    group_id = await make_group(client, big_org, "Finance", finance)
    request_id, step = await one_group_step(client, big_org, group_id, required_approvals=2)
    request = {"id": request_id}
    assert (await vote(client, finance[0], request["id"], step["id"])).status_code == 200
    rejected = await vote(client, finance[1], request["id"], step["id"], "reject")
    assert rejected.status_code == 200, rejected.text
    assert (rejected.json()["status"], rejected.json()["request_status"]) == (
        "rejected",
        "rejected",
    )


async def test_non_member_is_refused_and_admin_may_vote(
    client: httpx.AsyncClient, big_org: Org
) -> None:
    finance = big_org.members[:2]
    group_id = await make_group(client, big_org, "Finance", finance)
    request_id, step = await one_group_step(client, big_org, group_id)
    request = {"id": request_id}
    assert step["required_approvals"] == 1
    outsider = big_org.members[4]
    assert_error(await vote(client, outsider, request["id"], step["id"]), 403, "FORBIDDEN")
    assert await status_of(client, big_org.admin, request["id"]) == "pending"
    by_admin = await vote(client, big_org.admin, request["id"], step["id"])
    assert by_admin.status_code == 200, by_admin.text
    assert by_admin.json()["request_status"] == "approved"


async def finance_and_security(client: httpx.AsyncClient, org: Org) -> tuple[str, str]:
    """Finance (members 0 to 2) and Security (member 3): their ids."""
    finance_id = await make_group(client, org, "Finance", org.members[:3])
    return finance_id, await make_group(client, org, "Security", org.members[3:4])


async def two_of_finance_and_security(
    client: httpx.AsyncClient, org: Org, groups: tuple[str, str], **create: Any
) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """A request whose chain is "2 of finance", then "1 of security" (in order only with
    ``is_sequential``): its id and the two steps."""
    request = await create_approval(client, org.admin, **create)
    made = await set_steps(
        client,
        org.admin,
        request["id"],
        [
            {"group_id": groups[0], "required_approvals": 2, "step_order": 1},
            {"group_id": groups[1], "step_order": 2},
        ],
    )
    assert made.status_code == 201, made.text
    fin_step, sec_step = made.json()["data"]
    return request["id"], fin_step, sec_step


async def test_parallel_one_of_security_and_two_of_finance(
    client: httpx.AsyncClient, big_org: Org
) -> None:
    finance, security = big_org.members[:3], big_org.members[3:4]
    groups = await finance_and_security(client, big_org)
    request_id, fin_step, sec_step = await two_of_finance_and_security(client, big_org, groups)
    # Parallel: finance may vote before security, and security before finance is done.
    assert (await vote(client, finance[0], request_id, fin_step["id"])).status_code == 200
    assert (await vote(client, security[0], request_id, sec_step["id"])).status_code == 200
    assert await status_of(client, big_org.admin, request_id) == "pending"
    done = await vote(client, finance[1], request_id, fin_step["id"])
    assert done.json()["request_status"] == "approved"

    # One reject anywhere ends it.
    second_id, fin_step, sec_step = await two_of_finance_and_security(client, big_org, groups)
    assert (await vote(client, finance[0], second_id, fin_step["id"])).status_code == 200
    rejected = await vote(client, security[0], second_id, sec_step["id"], "reject")
    assert rejected.json()["request_status"] == "rejected"
    chain = await client.get(f"/api/v1/approvals/{second_id}/steps", headers=finance[0].headers)
    assert [s["status"] for s in chain.json()["data"]] == ["skipped", "rejected"]


async def test_sequential_opens_the_second_only_after_the_first(
    client: httpx.AsyncClient, big_org: Org
) -> None:
    finance, security = big_org.members[:3], big_org.members[3:4]
    groups = await finance_and_security(client, big_org)
    request_id, fin_step, sec_step = await two_of_finance_and_security(
        client, big_org, groups, is_sequential=True
    )
    early = await vote(client, security[0], request_id, sec_step["id"])
    assert_error(early, 409, "STEP_OUT_OF_ORDER")
    assert (await vote(client, finance[0], request_id, fin_step["id"])).status_code == 200
    still = await vote(client, security[0], request_id, sec_step["id"])
    assert_error(still, 409, "STEP_OUT_OF_ORDER")
    assert (await vote(client, finance[2], request_id, fin_step["id"])).status_code == 200
    done = await vote(client, security[0], request_id, sec_step["id"])
    assert done.json()["request_status"] == "approved"


async def test_mixed_chain_of_a_person_and_a_group(client: httpx.AsyncClient, big_org: Org) -> None:
    finance = big_org.members[:2]
    finance_id = await make_group(client, big_org, "Finance", finance)
    request = await create_approval(client, big_org.admin)
    person = big_org.members[5]
    made = await set_steps(
        client,
        big_org.admin,
        request["id"],
        [
            {"approver_id": person.user_id, "step_order": 1},
            {"group_id": finance_id, "step_order": 2},
        ],
    )
    assert made.status_code == 201, made.text
    person_step, group_step = made.json()["data"]
    assert set(person_step) == {"id", "step_order", "approver_id", "status"}
    assert (await vote(client, person, request["id"], person_step["id"])).status_code == 200
    done = await vote(client, finance[1], request["id"], group_step["id"])
    assert done.json()["request_status"] == "approved"


@pytest.mark.parametrize(
    ("step", "field"),
    [
        ({"group_id": "FIN", "approver_id": "ME", "step_order": 1}, "steps.0"),
        ({"step_order": 1}, "steps.0.approver_id"),
        ({"group_id": "not-a-uuid", "step_order": 1}, "steps.0.group_id"),
        ({"group_id": "UNKNOWN", "step_order": 1}, "steps.0.group_id"),
        ({"group_id": "FOREIGN", "step_order": 1}, "steps.0.group_id"),
        (
            {"group_id": "FIN", "required_approvals": 3, "step_order": 1},
            "steps.0.required_approvals",
        ),
        (
            {"group_id": "FIN", "required_approvals": 0, "step_order": 1},
            "steps.0.required_approvals",
        ),
        ({"approver_id": "ME", "required_approvals": 2, "step_order": 1}, "steps.0"),
    ],
)
async def test_invalid_group_steps_are_refused(
    client: httpx.AsyncClient,
    big_org: Org,
    other_org: Org,
    step: dict[str, Any],
    field: str,
) -> None:
    finance_id = await make_group(client, big_org, "Finance", big_org.members[:2])
    foreign_id = await make_group(client, other_org, "Finance", other_org.members[:1])
    names = {
        "FIN": finance_id,
        "UNKNOWN": "00000000-0000-4000-8000-000000000000",
        "FOREIGN": foreign_id,
        "ME": big_org.members[0].user_id,
    }
    body = {key: names.get(value, value) for key, value in step.items()}
    request = await create_approval(client, big_org.admin)
    response = await set_steps(client, big_org.admin, request["id"], [body])
    details = assert_error(response, 400, "VALIDATION_ERROR")
    assert field in [f["field"] for f in details["fields"]], details
    assert "Globex" not in response.text and foreign_id not in response.text
    chain = await client.get(
        f"/api/v1/approvals/{request['id']}/steps", headers=big_org.admin.headers
    )
    assert chain.json()["data"] == []


async def test_the_inbox_shows_an_open_group_step_to_its_members_only(
    client: httpx.AsyncClient, big_org: Org
) -> None:
    finance, security = big_org.members[:3], big_org.members[3:4]
    groups = await finance_and_security(client, big_org)
    request_id, fin_step, _ = await two_of_finance_and_security(
        client, big_org, groups, is_sequential=True
    )

    async def inbox(who: Member) -> list[str]:
        response = await client.get("/api/v1/approvals?assigned_to=me", headers=who.headers)
        assert response.status_code == 200, response.text
        return [r["id"] for r in response.json()["data"]]

    assert await inbox(finance[0]) == [request_id]
    assert await inbox(finance[2]) == [request_id]
    # Security's step is not open yet; an outsider never sees it.
    assert await inbox(security[0]) == []
    assert await inbox(big_org.members[5]) == []
    assert (await vote(client, finance[0], request_id, fin_step["id"])).status_code == 200
    # Voted: no longer waiting for that member, still for the others.
    assert await inbox(finance[0]) == []
    assert await inbox(finance[1]) == [request_id]
    assert (await vote(client, finance[1], request_id, fin_step["id"])).status_code == 200
    assert await inbox(finance[2]) == []
    assert await inbox(security[0]) == [request_id]


async def test_members_voting_at_once_are_each_counted(
    client: httpx.AsyncClient, big_org: Org
) -> None:
    finance = big_org.members[:3]
    group_id = await make_group(client, big_org, "Finance", finance)
    request_id, step = await one_group_step(client, big_org, group_id, required_approvals=3)
    answers = await asyncio.gather(
        *(vote(client, member, request_id, step["id"]) for member in finance)
    )
    assert [a.status_code for a in answers] == [200, 200, 200], [a.text for a in answers]
    assert sorted(a.json()["step_current_approvals"] for a in answers) == [1, 2, 3]
    read = await client.get(f"/api/v1/approvals/{request_id}", headers=big_org.admin.headers)
    assert read.json()["status"] == "approved"
    assert len(read.json()["votes"]) == 3


async def test_deleting_a_group_leaves_its_step_to_admins(
    client: httpx.AsyncClient, big_org: Org
) -> None:
    finance = big_org.members[:2]
    group_id = await make_group(client, big_org, "Finance", finance)
    request_id, step = await one_group_step(client, big_org, group_id)
    deleted = await client.delete(f"/api/v1/groups/{group_id}", headers=big_org.admin.headers)
    assert deleted.status_code == 204, deleted.text
    assert_error(await vote(client, finance[0], request_id, step["id"]), 403, "FORBIDDEN")
    chain = await client.get(f"/api/v1/approvals/{request_id}/steps", headers=finance[0].headers)
    assert chain.status_code == 200 and chain.json()["data"][0].get("group_name") is None
    by_admin = await vote(client, big_org.admin, request_id, step["id"])
    assert by_admin.json()["request_status"] == "approved"
