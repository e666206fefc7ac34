"""Approve with edits on chains with group steps (issues 35 and 36), on SQLite and
PostgreSQL: the votes cast on the old arguments are dismissed (the audit keeps them),
approved steps reopen and quorum counts restart, the edit is the editor's vote (a
delegate's, for whom they stand in), the dismissed voters find the request in their inbox
again, a chain voted on is locked, and an edit landing among concurrent votes leaves every
count equal to the votes that stand."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import orjson
import pytest
from joserfc import jws

from signoff.context import AppContext
from signoff.receipts.arguments import arguments_hash
from tests.conftest import Member, Org, assert_error, create_approval, create_org
from tests.people.test_delegation import away
from tests.receipts.test_receipts import ARGS, SCHEMA
from tests.steps.test_group_steps import finance_and_security, set_steps
from tests.steps.test_steps import vote

pytestmark = pytest.mark.anyio

EDITED = {"service": "billing", "replicas": 5, "regions": ["eu"]}


@pytest.fixture
async def big_org(ctx: AppContext) -> Org:
    """An admin and six members: finance holds the first three, security the fourth."""
    return await create_org(ctx, "Initech", members=6)


async def group_chain(
    client: httpx.AsyncClient,
    org: Org,
    groups: tuple[str, str],
    quorum: int = 2,
    **create: Any,
) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """A request with arguments and a schema whose chain is "``quorum`` of finance" and
    "1 of security": its id and the two steps."""
    created = await create_approval(
        client, org.admin, title="Scale billing", arguments=ARGS, arguments_schema=SCHEMA, **create
    )
    request_id: str = created["id"]
    made = await set_steps(
        client,
        org.admin,
        request_id,
        [
            {"group_id": groups[0], "required_approvals": quorum, "step_order": 1},
            {"group_id": groups[1], "step_order": 2},
        ],
    )
    assert made.status_code == 201, made.text
    fin_step, sec_step = made.json()["data"]
    return request_id, fin_step, sec_step


async def read(client: httpx.AsyncClient, org: Org, request_id: str) -> dict[str, Any]:
    response = await client.get(f"/api/v1/approvals/{request_id}", headers=org.admin.headers)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def steps_of(client: httpx.AsyncClient, org: Org, request_id: str) -> list[dict[str, Any]]:
    listed = await client.get(f"/api/v1/approvals/{request_id}/steps", headers=org.admin.headers)
    assert listed.status_code == 200, listed.text
    found: list[dict[str, Any]] = listed.json()["data"]
    return found


async def edited_event(client: httpx.AsyncClient, org: Org, request_id: str) -> dict[str, Any]:
    response = await client.get(f"/api/v1/approvals/{request_id}/events", headers=org.admin.headers)
    [event] = [e for e in response.json()["data"] if e["type"] == "arguments.edited"]
    return event


async def inbox(client: httpx.AsyncClient, who: Member) -> list[str]:
    response = await client.get("/api/v1/approvals?assigned_to=me", headers=who.headers)
    assert response.status_code == 200, response.text
    return [r["id"] for r in response.json()["data"]]


async def both_steps_voted(
    client: httpx.AsyncClient, org: Org
) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """``group_chain`` of 2 of finance and 1 of security, voted by the first of finance
    and by security: the request's id and its two steps."""
    groups = await finance_and_security(client, org)
    request_id, fin, sec = await group_chain(client, org, groups)
    assert (await vote(client, org.members[0], request_id, fin["id"])).status_code == 200
    assert (await vote(client, org.members[3], request_id, sec["id"])).status_code == 200
    return request_id, fin, sec


def decided_by(receipt: str) -> list[str]:
    claims: dict[str, Any] = orjson.loads(jws.extract_compact(receipt.encode()).payload)
    assert claims["arguments_hash"] == arguments_hash(EDITED)
    return sorted(claims["decided_by"])


async def test_an_edit_dismisses_group_votes_and_reopens_approved_steps(
    client: httpx.AsyncClient, big_org: Org
) -> None:
    finance, security = big_org.members[:3], big_org.members[3]
    request_id, fin, sec = await both_steps_voted(client, big_org)
    assert await inbox(client, finance[0]) == [] and await inbox(client, security) == []

    edited = await vote(client, finance[1], request_id, fin["id"], arguments=EDITED)
    assert edited.status_code == 200, edited.text
    answer = edited.json()
    # The edit is finance[1]'s vote, the step's only one now: 1 of 2.
    assert (answer["status"], answer["request_status"]) == ("pending", "pending")
    assert answer["step_current_approvals"] == 1
    chain = await steps_of(client, big_org, request_id)
    assert [(s["status"], s["current_approvals"]) for s in chain] == [
        ("pending", 1),
        ("pending", 0),
    ]
    body = await read(client, big_org, request_id)
    assert body["current_approvals"] == 0 and body["arguments"] == EDITED
    assert [(v["user_id"], v["step_id"]) for v in body["votes"]] == [
        (finance[1].user_id, fin["id"])
    ]

    event = await edited_event(client, big_org, request_id)
    assert event["data"]["counts_as_approval"] is True
    assert event["data"]["step_id"] == fin["id"]
    assert event["data"]["step_current_approvals"] == 1
    assert event["data"]["dismissed_votes"] == {
        fin["id"]: [finance[0].user_id],
        sec["id"]: [security.user_id],
    }
    assert event["data"]["reopened_steps"] == [sec["id"]]

    # Those dismissed are asked again: their inbox, then their votes count anew.
    assert await inbox(client, finance[0]) == [request_id]
    assert await inbox(client, security) == [request_id]
    assert await inbox(client, finance[1]) == []
    refused = await vote(client, finance[1], request_id, fin["id"])
    assert_error(refused, 409, "ALREADY_VOTED")
    assert (await vote(client, finance[0], request_id, fin["id"])).status_code == 200
    assert (await vote(client, security, request_id, sec["id"])).status_code == 200
    final = await read(client, big_org, request_id)
    assert final["status"] == "approved"
    assert decided_by(final["receipt"]) == sorted(
        [finance[0].user_id, finance[1].user_id, security.user_id]
    )


async def test_an_edit_reaching_a_quorum_of_one_approves_the_step(
    client: httpx.AsyncClient, big_org: Org
) -> None:
    finance, security = big_org.members[:3], big_org.members[3]
    groups = await finance_and_security(client, big_org)
    request_id, fin, sec = await group_chain(client, big_org, groups, quorum=1)
    assert (await vote(client, finance[0], request_id, fin["id"])).status_code == 200
    # The security step's edit approves it; finance's approval is dismissed, its step reopens.
    edited = await vote(client, security, request_id, sec["id"], arguments=EDITED)
    assert edited.status_code == 200, edited.text
    chain = await steps_of(client, big_org, request_id)
    assert [s["status"] for s in chain] == ["pending", "approved"]
    assert (await read(client, big_org, request_id))["current_approvals"] == 1
    assert (await edited_event(client, big_org, request_id))["data"]["reopened_steps"] == [
        fin["id"]
    ]
    assert (await vote(client, finance[2], request_id, fin["id"])).status_code == 200
    final = await read(client, big_org, request_id)
    assert final["status"] == "approved"
    assert decided_by(final["receipt"]) == sorted([finance[2].user_id, security.user_id])


async def test_a_sequential_group_chain_reopens_its_first_step(
    client: httpx.AsyncClient, big_org: Org
) -> None:
    finance, security = big_org.members[:3], big_org.members[3]
    groups = await finance_and_security(client, big_org)
    request_id, fin, sec = await group_chain(client, big_org, groups, is_sequential=True)
    for member in finance[:2]:
        assert (await vote(client, member, request_id, fin["id"])).status_code == 200
    edited = await vote(client, security, request_id, sec["id"], arguments=EDITED)
    assert edited.status_code == 200, edited.text
    chain = await steps_of(client, big_org, request_id)
    assert [(s["status"], s["current_approvals"]) for s in chain] == [
        ("pending", 0),
        ("approved", 1),
    ]
    assert await inbox(client, finance[0]) == [request_id]
    for member in finance[:2]:
        assert (await vote(client, member, request_id, fin["id"])).status_code == 200
    assert (await read(client, big_org, request_id))["status"] == "approved"


async def test_a_delegates_edit_counts_for_the_member_they_stand_in_for(
    client: httpx.AsyncClient, big_org: Org
) -> None:
    finance, bob = big_org.members[:3], big_org.members[5]
    groups = await finance_and_security(client, big_org)
    request_id, fin, _ = await group_chain(client, big_org, groups)
    assert (await vote(client, finance[1], request_id, fin["id"])).status_code == 200
    # finance[0] is away; Bob, in no group, stands in and edits.
    assert (await away(client, finance[0], bob)).status_code == 200
    edited = await vote(client, bob, request_id, fin["id"], arguments=EDITED)
    assert edited.status_code == 200, edited.text
    assert edited.json()["step_current_approvals"] == 1
    body = await read(client, big_org, request_id)
    [cast] = body["votes"]
    assert cast["user_id"] == bob.user_id
    event = await edited_event(client, big_org, request_id)
    assert event["data"]["on_behalf_of"] == finance[0].user_id
    assert event["data"]["dismissed_votes"] == {fin["id"]: [finance[1].user_id]}
    # Ann's vote was cast by Bob: she counts once.
    assert_error(await vote(client, finance[0], request_id, fin["id"]), 409, "ALREADY_VOTED")
    assert (await vote(client, finance[1], request_id, fin["id"])).status_code == 200


async def test_a_vote_on_a_group_step_locks_the_chain(
    client: httpx.AsyncClient, big_org: Org
) -> None:
    finance = big_org.members[:3]
    groups = await finance_and_security(client, big_org)
    request_id, fin, _ = await group_chain(client, big_org, groups)
    replace = [{"group_id": groups[1], "step_order": 1}]
    # Nobody voted: the chain may be replaced (with the same chain again).
    again = [
        {"group_id": groups[0], "required_approvals": 2, "step_order": 1},
        {"group_id": groups[1], "step_order": 2},
    ]
    assert (await set_steps(client, big_org.admin, request_id, again)).status_code == 201
    [fin, sec] = await steps_of(client, big_org, request_id)
    # One vote short of the quorum: the step is still pending, the chain is locked.
    assert (await vote(client, finance[0], request_id, fin["id"])).status_code == 200
    locked = await set_steps(client, big_org.admin, request_id, replace)
    assert_error(locked, 409, "STEPS_LOCKED")
    assert [s["id"] for s in await steps_of(client, big_org, request_id)] == [fin["id"], sec["id"]]


async def test_an_edit_among_concurrent_votes_leaves_counts_equal_to_standing_votes(
    client: httpx.AsyncClient, big_org: Org
) -> None:
    finance, security = big_org.members[:3], big_org.members[3]
    groups = await finance_and_security(client, big_org)
    for _ in range(3):
        request_id, fin, sec = await group_chain(client, big_org, groups, quorum=3)
        assert (await vote(client, finance[0], request_id, fin["id"])).status_code == 200
        answers = await asyncio.gather(
            vote(client, finance[1], request_id, fin["id"]),
            vote(client, security, request_id, sec["id"]),
            vote(client, finance[2], request_id, fin["id"], arguments=EDITED),
        )
        assert [a.status_code for a in answers] == [200, 200, 200], [a.text for a in answers]
        body = await read(client, big_org, request_id)
        chain = {s["id"]: s for s in await steps_of(client, big_org, request_id)}
        standing: dict[str, list[str]] = {}
        for cast in body["votes"]:
            standing.setdefault(cast["step_id"], []).append(cast["user_id"])
        # The edit stands, and finance[0]'s vote, always before it, never does.
        assert finance[2].user_id in standing[fin["id"]]
        assert finance[0].user_id not in standing[fin["id"]]
        assert chain[fin["id"]]["current_approvals"] == len(standing[fin["id"]])
        assert chain[sec["id"]]["current_approvals"] == len(standing.get(sec["id"], []))
        assert chain[sec["id"]]["status"] == ("approved" if sec["id"] in standing else "pending")
        approved = sum(1 for s in chain.values() if s["status"] == "approved")
        assert body["current_approvals"] == approved and body["status"] == "pending"
        assert body["arguments"] == EDITED
