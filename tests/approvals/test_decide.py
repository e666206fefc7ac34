"""PATCH /api/v1/approvals/:id: approve, reject, count-based votes, refusals and races."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import orjson
import pytest

from signoff.common.time import utcnow
from signoff.context import AppContext
from signoff.orgs import service as orgs_service
from tests.conftest import Member, Org, assert_error, create_approval, create_org
from tests.helpers import NO_SWEEP, CallbackReceiver, backdate_expiry, stored_request


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    return NO_SWEEP


def _url(request: dict[str, Any]) -> str:
    return f"/api/v1/approvals/{request['id']}"


async def _decide(
    client: httpx.AsyncClient, request: dict[str, Any], who: Member, **body: Any
) -> httpx.Response:
    return await client.patch(_url(request), headers=who.headers, json=body)


# ---- approve and reject ----


@pytest.mark.parametrize(("decision", "status"), [("approve", "approved"), ("reject", "rejected")])
async def test_decision_answers_the_whole_request(
    client: httpx.AsyncClient, org: Org, ctx: AppContext, decision: str, status: str
) -> None:
    created = await create_approval(client, org.member, metadata={"a": 1}, source="ci")
    response = await _decide(client, created, org.admin, decision=decision, comment="Reviewed")
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["status"] == status
    assert body["callback_delivered"] is False  # no callback_url
    assert body["decided_by"] == org.admin.user_id
    assert body["decided_by_name"] == org.admin.name
    assert body["decision_comment"] == "Reviewed"
    assert body["decided_at"].endswith("Z")
    assert body["updated_at"] == body["decided_at"]
    assert body["current_approvals"] == (1 if decision == "approve" else 0)
    # The whole request, as the single read shows it, but the receipt: signed on read,
    # it is the GET's to show (docs/receipts.md); the answer only says it was issued.
    read = (await client.get(_url(created), headers=org.member.headers)).json()
    for key, value in read.items():
        if key not in ("steps", "votes", "receipt"):
            assert body[key] == value, key
    assert body["receipt"] is None
    assert (read["receipt"] is not None) == (decision == "approve") == body["receipt_issued"]
    assert "callback_headers" not in body
    stored = await stored_request(ctx, created["id"])
    assert stored.status == status
    assert str(stored.decided_by) == org.admin.user_id


async def test_decide_with_json_content_type_only_needs_decision(
    client: httpx.AsyncClient, org: Org
) -> None:
    created = await create_approval(client, org.member)
    response = await client.patch(
        _url(created),
        headers={**org.member.headers, "Content-Type": "application/json"},
        content=b'{"decision": "approve", "comment": "", "source": null, "extra": [1]}',
    )
    assert response.status_code == 200, response.text
    assert response.json()["decision_comment"] is None
    comments = await client.get(f"{_url(created)}/comments", headers=org.member.headers)
    assert comments.json()["data"] == []


async def test_comment_is_stored_as_a_comment_and_an_event(
    client: httpx.AsyncClient, org: Org
) -> None:
    created = await create_approval(client, org.member)
    response = await _decide(
        client, created, org.member, decision="reject", comment="Not on a Friday", source="slack"
    )
    assert response.json()["comments_count"] == 1
    comments = (await client.get(f"{_url(created)}/comments", headers=org.admin.headers)).json()
    assert [(c["body"], c["user_id"]) for c in comments["data"]] == [
        ("Not on a Friday", org.member.user_id)
    ]
    events = (await client.get(f"{_url(created)}/events", headers=org.admin.headers)).json()
    types = [e["type"] for e in events["data"]]
    assert types == ["request.created", "comment.created", "request.rejected"]
    rejected = events["data"][-1]
    assert rejected["actor_id"] == org.member.user_id
    assert rejected["data"]["decision"] == "reject"
    assert rejected["data"]["comment"] == "Not on a Friday"
    assert rejected["data"]["source"] == "slack"


async def test_callback_delivered_reports_the_first_attempt(
    client: httpx.AsyncClient, org: Org
) -> None:
    async with CallbackReceiver(200) as ok, CallbackReceiver(500) as failing:
        good = await create_approval(client, org.member, callback_url=ok.url)
        bad = await create_approval(client, org.member, callback_url=failing.url)
        accepted = await _decide(client, good, org.admin, decision="approve")
        refused = await _decide(client, bad, org.admin, decision="reject")
        assert accepted.json()["callback_delivered"] is True
        assert refused.json()["callback_delivered"] is False
        payload = orjson.loads(ok.bodies[0])
        assert payload["event"] == "approval.decided"
        assert payload["request_id"] == good["id"]
        assert payload["status"] == "approved"
        # The decision stands whatever the receiver says.
        assert refused.json()["status"] == "rejected"


# ---- validation and scoping ----


BAD_BODIES: list[tuple[dict[str, Any], str]] = [
    ({}, "decision"),
    ({"decision": None}, "decision"),
    ({"decision": ""}, "decision"),
    ({"decision": "approved"}, "decision"),
    ({"decision": "APPROVE"}, "decision"),
    ({"decision": "yes"}, "decision"),
    ({"decision": 1}, "decision"),
    ({"decision": ["approve"]}, "decision"),
    ({"decision": "approve", "comment": "x" * 10_001}, "comment"),
    ({"decision": "approve", "comment": 5}, "comment"),
    ({"decision": "approve", "source": "s" * 101}, "source"),
]


async def test_bad_bodies_are_400(client: httpx.AsyncClient, org: Org, ctx: AppContext) -> None:
    created = await create_approval(client, org.member)
    for body, field in BAD_BODIES:
        response = await _decide(client, created, org.admin, **body)
        details = assert_error(response, 400, "VALIDATION_ERROR")
        assert field in [f["field"] for f in details["fields"]], (body, details)
    stored = await stored_request(ctx, created["id"])
    assert (stored.status, stored.current_approvals) == ("pending", 0)


async def test_malformed_json_is_400(client: httpx.AsyncClient, org: Org) -> None:
    created = await create_approval(client, org.member)
    response = await client.patch(
        _url(created),
        headers={**org.admin.headers, "Content-Type": "application/json"},
        content=b'{"decision": "approve"',
    )
    assert_error(response, 400, "VALIDATION_ERROR")


async def test_another_orgs_request_is_404(
    client: httpx.AsyncClient, org: Org, other_org: Org, ctx: AppContext
) -> None:
    theirs = await create_approval(client, other_org.member)
    response = await _decide(client, theirs, org.admin, decision="approve")
    assert_error(response, 404, "NOT_FOUND")
    assert (await stored_request(ctx, theirs["id"])).status == "pending"
    for bad in (str(uuid.uuid4()), "nope"):
        missing = await client.patch(
            f"/api/v1/approvals/{bad}", headers=org.admin.headers, json={"decision": "approve"}
        )
        assert_error(missing, 404, "NOT_FOUND")


# ---- count-based approvals ----


async def test_three_distinct_approvals_approve(
    client: httpx.AsyncClient, org: Org, ctx: AppContext
) -> None:
    created = await create_approval(client, org.member, required_approvals=3)
    first = await _decide(client, created, org.members[0], decision="approve", comment="one")
    assert first.status_code == 200
    assert first.json()["status"] == "pending"
    assert first.json()["current_approvals"] == 1
    assert first.json()["callback_delivered"] is False
    assert first.json()["decided_at"] is None and first.json()["decided_by"] is None
    assert first.json()["decision_comment"] is None

    second = await _decide(client, created, org.members[1], decision="approve")
    assert (second.json()["status"], second.json()["current_approvals"]) == ("pending", 2)
    read = (await client.get(_url(created), headers=org.admin.headers)).json()
    assert (read["status"], read["current_approvals"]) == ("pending", 2)

    third = await _decide(client, created, org.admin, decision="approve", comment="three")
    assert third.json()["status"] == "approved"
    assert third.json()["current_approvals"] == 3
    # The last approver decided it.
    assert third.json()["decided_by"] == org.admin.user_id
    assert third.json()["decided_by_name"] == org.admin.name
    assert third.json()["decision_comment"] == "three"
    assert third.json()["comments_count"] == 2
    events = (await client.get(f"{_url(created)}/events", headers=org.admin.headers)).json()
    changes = [
        (e["type"], e["data"].get("current_approvals"))
        for e in events["data"]
        if e["type"] != "comment.created"
    ]
    assert changes == [
        ("request.created", None),
        ("request.vote_recorded", 1),
        ("request.vote_recorded", 2),
        ("request.approved", 3),
    ]


async def test_one_reject_rejects_a_count_based_request(
    client: httpx.AsyncClient, org: Org
) -> None:
    created = await create_approval(client, org.member, required_approvals=3)
    await _decide(client, created, org.members[0], decision="approve")
    rejected = await _decide(client, created, org.members[1], decision="reject")
    assert rejected.json()["status"] == "rejected"
    assert rejected.json()["current_approvals"] == 1
    assert rejected.json()["decided_by"] == org.members[1].user_id


async def test_a_second_vote_by_the_same_user_is_already_voted(
    client: httpx.AsyncClient, org: Org, ctx: AppContext
) -> None:
    created = await create_approval(client, org.member, required_approvals=3)
    assert (await _decide(client, created, org.member, decision="approve")).status_code == 200
    again = await _decide(client, created, org.member, decision="approve")
    assert_error(again, 409, "ALREADY_VOTED")
    # Changing one's mind is a second vote as well.
    assert_error(
        await _decide(client, created, org.member, decision="reject"), 409, "ALREADY_VOTED"
    )
    # Another connection of the same user is still the same user.
    async with ctx.transaction() as uow:
        owner = await orgs_service.resolve_user(uow.orgs, uuid.UUID(org.id), org.member.email)
        issued = await orgs_service.create_connection(
            uow.orgs,
            ctx.box,
            ctx.settings,
            uuid.UUID(org.id),
            owner=owner,
            name="second key",
            rate_limit=None,
            now=utcnow(),
        )
    second_key = {"Authorization": f"Bearer {issued.api_key}"}
    response = await client.patch(_url(created), headers=second_key, json={"decision": "approve"})
    assert_error(response, 409, "ALREADY_VOTED")
    read = (await client.get(_url(created), headers=org.admin.headers)).json()
    assert (read["status"], read["current_approvals"]) == ("pending", 1)


# ---- terminal states ----


async def _in_state(
    client: httpx.AsyncClient, org: Org, ctx: AppContext, status: str
) -> dict[str, Any]:
    expires = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    created = await create_approval(client, org.member, expires_at=expires)
    if status == "approved":
        await _decide(client, created, org.admin, decision="approve")
    elif status == "rejected":
        await _decide(client, created, org.admin, decision="reject")
    elif status == "cancelled":
        await client.delete(_url(created), headers=org.admin.headers)
    else:
        await backdate_expiry(ctx, created["id"])
    return created


@pytest.mark.parametrize("status", ["approved", "rejected", "cancelled", "expired"])
async def test_deciding_a_terminal_request_is_request_not_pending(
    client: httpx.AsyncClient, org: Org, ctx: AppContext, status: str
) -> None:
    created = await _in_state(client, org, ctx, status)
    before = await client.get(_url(created), headers=org.admin.headers)
    for decision in ("approve", "reject"):
        response = await _decide(client, created, org.members[1], decision=decision)
        details = assert_error(response, 409, "REQUEST_NOT_PENDING")
        assert details["status"] == status
    # Nothing changed.
    after = await client.get(_url(created), headers=org.admin.headers)
    assert after.json() == before.json()
    if status == "expired":
        # Refused before the sweep ran, and the refusal wrote nothing either.
        assert (await stored_request(ctx, created["id"])).status == "pending"


# ---- races ----


async def test_parallel_approvals_of_a_single_approval_request_approve_once(
    client: httpx.AsyncClient, ctx: AppContext
) -> None:
    crowd = await create_org(ctx, "Crowd", members=19)
    created = await create_approval(client, crowd.admin)
    people = [crowd.admin, *crowd.members]
    responses = await asyncio.gather(
        *(_decide(client, created, who, decision="approve") for who in people)
    )
    codes = Counter(r.status_code for r in responses)
    assert codes == {200: 1, 409: 19}, [r.text for r in responses if r.status_code >= 500]
    losers = [r for r in responses if r.status_code == 409]
    for loser in losers:
        assert assert_error(loser, 409, "REQUEST_NOT_PENDING")["status"] == "approved"
    winner = next(r for r in responses if r.status_code == 200).json()
    read = (await client.get(_url(created), headers=crowd.admin.headers)).json()
    assert read["status"] == "approved"
    assert read["current_approvals"] == 1
    assert read["decided_by"] == winner["decided_by"]
    events = (await client.get(f"{_url(created)}/events", headers=crowd.admin.headers)).json()
    assert [e["type"] for e in events["data"]].count("request.approved") == 1


async def test_parallel_approvals_by_distinct_users_count_exactly(
    client: httpx.AsyncClient, ctx: AppContext
) -> None:
    crowd = await create_org(ctx, "Crowd", members=19)
    people = [crowd.admin, *crowd.members]
    created = await create_approval(client, crowd.admin, required_approvals=len(people))
    responses = await asyncio.gather(
        *(_decide(client, created, who, decision="approve") for who in people)
    )
    assert [r.status_code for r in responses] == [200] * len(people)
    statuses = Counter(r.json()["status"] for r in responses)
    assert statuses == {"pending": 19, "approved": 1}
    # Every intermediate answer saw a distinct count: no two votes read the same state.
    counts = sorted(r.json()["current_approvals"] for r in responses)
    assert counts == list(range(1, 21))
    read = (await client.get(_url(created), headers=crowd.admin.headers)).json()
    assert (read["status"], read["current_approvals"]) == ("approved", 20)
    events = (await client.get(f"{_url(created)}/events", headers=crowd.admin.headers)).json()
    types = Counter(e["type"] for e in events["data"])
    assert types["request.vote_recorded"] == 19
    assert types["request.approved"] == 1


async def test_parallel_votes_by_one_user_count_once(client: httpx.AsyncClient, org: Org) -> None:
    created = await create_approval(client, org.member, required_approvals=2)
    responses = await asyncio.gather(
        *(_decide(client, created, org.member, decision="approve") for _ in range(10))
    )
    assert Counter(r.status_code for r in responses) == {200: 1, 409: 9}
    for response in responses:
        if response.status_code == 409:
            assert_error(response, 409, "ALREADY_VOTED")
    read = (await client.get(_url(created), headers=org.admin.headers)).json()
    assert (read["status"], read["current_approvals"]) == ("pending", 1)


async def test_racing_approve_and_reject_settle_on_one_outcome(
    client: httpx.AsyncClient, org: Org
) -> None:
    created = await create_approval(client, org.member)
    approve, reject, cancel = await asyncio.gather(
        _decide(client, created, org.members[0], decision="approve"),
        _decide(client, created, org.members[1], decision="reject"),
        client.delete(_url(created), headers=org.members[2].headers),
    )
    winners = [r for r in (approve, reject, cancel) if r.status_code == 200]
    assert len(winners) == 1
    final = (await client.get(_url(created), headers=org.admin.headers)).json()
    assert final["status"] == winners[0].json()["status"]
    for loser in (approve, reject, cancel):
        if loser.status_code != 200:
            assert assert_error(loser, 409, "REQUEST_NOT_PENDING")["status"] == final["status"]
