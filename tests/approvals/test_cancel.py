"""DELETE /api/v1/approvals/:id: cancellation of pending requests, and its refusals."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import orjson
import pytest

from signoff.context import AppContext
from tests.conftest import Org, assert_error, create_approval
from tests.helpers import NO_SWEEP, CallbackReceiver, backdate_expiry, stored_request


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    return NO_SWEEP


def _url(request: dict[str, Any]) -> str:
    return f"/api/v1/approvals/{request['id']}"


async def test_cancel_answers_the_whole_request(
    client: httpx.AsyncClient, org: Org, ctx: AppContext
) -> None:
    created = await create_approval(client, org.member, metadata={"job": 7})
    response = await client.delete(_url(created), headers=org.member.headers)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["id"] == created["id"]
    assert body["status"] == "cancelled"
    assert body["cancelled_at"].endswith("Z")
    assert body["decided_at"] == body["cancelled_at"]
    assert body["decided_by"] == org.member.user_id
    assert body["decided_by_name"] == org.member.name
    assert body["callback_delivered"] is False
    assert body["metadata"] == {"job": 7}
    read = (await client.get(_url(created), headers=org.admin.headers)).json()
    for key, value in read.items():
        if key not in ("steps", "votes"):
            assert body[key] == value, key
    stored = await stored_request(ctx, created["id"])
    assert stored.status == "cancelled"
    assert stored.cancelled_at is not None


async def test_any_member_may_cancel_and_json_headers_with_no_body_are_fine(
    client: httpx.AsyncClient, org: Org
) -> None:
    created = await create_approval(client, org.members[0])
    response = await client.request(
        "DELETE",
        _url(created),
        headers={**org.members[1].headers, "Content-Type": "application/json"},
        content=b"",
    )
    assert response.status_code == 200, response.text
    assert response.json()["decided_by"] == org.members[1].user_id


async def test_cancel_keeps_the_votes_so_far(client: httpx.AsyncClient, org: Org) -> None:
    created = await create_approval(client, org.member, required_approvals=3)
    await client.patch(_url(created), headers=org.admin.headers, json={"decision": "approve"})
    body = (await client.delete(_url(created), headers=org.member.headers)).json()
    assert (body["status"], body["current_approvals"]) == ("cancelled", 1)


@pytest.mark.parametrize("status", ["approved", "rejected", "cancelled", "expired"])
async def test_cancelling_a_terminal_request_is_request_not_pending(
    client: httpx.AsyncClient, org: Org, ctx: AppContext, status: str
) -> None:
    expires = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    created = await create_approval(client, org.member, expires_at=expires)
    if status in ("approved", "rejected"):
        decision = "approve" if status == "approved" else "reject"
        await client.patch(_url(created), headers=org.admin.headers, json={"decision": decision})
    elif status == "cancelled":
        await client.delete(_url(created), headers=org.admin.headers)
    else:
        await backdate_expiry(ctx, created["id"])
    before = (await client.get(_url(created), headers=org.admin.headers)).json()
    response = await client.delete(_url(created), headers=org.member.headers)
    details = assert_error(response, 409, "REQUEST_NOT_PENDING")
    assert details["status"] == status
    assert (await client.get(_url(created), headers=org.admin.headers)).json() == before


async def test_another_orgs_request_is_404(
    client: httpx.AsyncClient, org: Org, other_org: Org, ctx: AppContext
) -> None:
    theirs = await create_approval(client, other_org.member)
    assert_error(await client.delete(_url(theirs), headers=org.admin.headers), 404, "NOT_FOUND")
    assert (await stored_request(ctx, theirs["id"])).status == "pending"
    for bad in (str(uuid.uuid4()), "12345"):
        response = await client.delete(f"/api/v1/approvals/{bad}", headers=org.admin.headers)
        assert_error(response, 404, "NOT_FOUND")


async def test_parallel_cancels_cancel_once(client: httpx.AsyncClient, org: Org) -> None:
    created = await create_approval(client, org.member)
    people = [org.admin, *org.members]
    responses = await asyncio.gather(
        *(client.delete(_url(created), headers=people[i % 4].headers) for i in range(12))
    )
    assert Counter(r.status_code for r in responses) == {200: 1, 409: 11}
    events = (await client.get(f"{_url(created)}/events", headers=org.admin.headers)).json()
    assert [e["type"] for e in events["data"]].count("request.cancelled") == 1


async def test_cancellation_callback_names_the_cancelling_user(
    client: httpx.AsyncClient, org: Org
) -> None:
    async with CallbackReceiver(200) as receiver:
        created = await create_approval(client, org.member, callback_url=receiver.url)
        response = await client.delete(_url(created), headers=org.admin.headers)
        assert response.json()["callback_delivered"] is True
    payload = orjson.loads(receiver.bodies[0])
    assert payload["status"] == "cancelled"
    assert payload["request_id"] == created["id"]
    assert payload["decided_by"] == {
        "id": org.admin.user_id,
        "email": org.admin.email,
        "name": org.admin.name,
    }
