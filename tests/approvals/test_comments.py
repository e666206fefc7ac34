"""POST and GET /api/v1/approvals/:id/comments."""

from __future__ import annotations

import uuid

import httpx

from signoff.context import AppContext
from tests.conftest import Org, assert_error, create_approval
from tests.helpers import stored_request

COMMENT_FIELDS = {"id", "approval_request_id", "request_id", "user_id", "body", "created_at"}


async def test_add_comment_answers_201_with_the_comment(
    client: httpx.AsyncClient, org: Org
) -> None:
    created = await create_approval(client, org.member)
    url = f"/api/v1/approvals/{created['id']}/comments"
    body = "  Checked the diff:\n\u2013 looks fine \u2705  "
    response = await client.post(url, headers=org.admin.headers, json={"body": body, "x": 1})
    assert response.status_code == 201, response.text
    comment = response.json()
    assert set(comment) == COMMENT_FIELDS
    uuid.UUID(comment["id"])
    assert comment["approval_request_id"] == comment["request_id"] == created["id"]
    assert comment["user_id"] == org.admin.user_id
    assert comment["body"] == body  # stored exactly as sent
    assert comment["created_at"].endswith("Z")
    read = await client.get(f"/api/v1/approvals/{created['id']}", headers=org.member.headers)
    assert read.json()["comments_count"] == 1


async def test_list_comments_oldest_first(
    client: httpx.AsyncClient, org: Org, ctx: AppContext
) -> None:
    created = await create_approval(client, org.member)
    url = f"/api/v1/approvals/{created['id']}/comments"
    assert (await client.get(url, headers=org.member.headers)).json() == {"data": []}
    authors = [org.members[0], org.admin, org.members[1], org.members[0]]
    posted = []
    for i, who in enumerate(authors):
        response = await client.post(url, headers=who.headers, json={"body": f"comment {i}"})
        posted.append(response.json())
    listing = await client.get(url, headers=org.members[2].headers)
    assert listing.status_code == 200
    data = listing.json()["data"]
    assert data == posted
    assert [c["body"] for c in data] == [f"comment {i}" for i in range(4)]
    assert [c["user_id"] for c in data] == [who.user_id for who in authors]
    assert (await stored_request(ctx, created["id"])).comments_count == 4


async def test_comments_on_a_decided_request_are_allowed(
    client: httpx.AsyncClient, org: Org
) -> None:
    """The audit trail goes on after a decision ("deployed at 10:02")."""
    created = await create_approval(client, org.member)
    base = f"/api/v1/approvals/{created['id']}"
    await client.patch(base, headers=org.admin.headers, json={"decision": "approve"})
    response = await client.post(
        f"{base}/comments", headers=org.member.headers, json={"body": "Deployed"}
    )
    assert response.status_code == 201
    read = (await client.get(base, headers=org.member.headers)).json()
    assert read["status"] == "approved"
    assert read["comments_count"] == 1


async def test_invalid_comment_bodies_are_400(client: httpx.AsyncClient, org: Org) -> None:
    created = await create_approval(client, org.member)
    url = f"/api/v1/approvals/{created['id']}/comments"
    for payload in (
        {},
        {"body": None},
        {"body": ""},
        {"body": " \n "},
        {"body": 7},
        {"body": "x" * 10_001},
    ):
        response = await client.post(url, headers=org.member.headers, json=payload)
        details = assert_error(response, 400, "VALIDATION_ERROR")
        assert details["fields"][0]["field"] == "body", payload
    for raw in (b"{", b"[]", b'"text"'):
        response = await client.post(
            url, headers={**org.member.headers, "Content-Type": "application/json"}, content=raw
        )
        assert_error(response, 400, "VALIDATION_ERROR")
    # The limit itself is fine.
    ok = await client.post(url, headers=org.member.headers, json={"body": "x" * 10_000})
    assert ok.status_code == 201
    listing = (await client.get(url, headers=org.member.headers)).json()["data"]
    assert len(listing) == 1


async def test_another_orgs_request_is_404(
    client: httpx.AsyncClient, org: Org, other_org: Org
) -> None:
    theirs = await create_approval(client, other_org.member)
    url = f"/api/v1/approvals/{theirs['id']}/comments"
    await client.post(url, headers=other_org.member.headers, json={"body": "internal note"})
    assert_error(
        await client.post(url, headers=org.admin.headers, json={"body": "hi"}), 404, "NOT_FOUND"
    )
    listing = await client.get(url, headers=org.admin.headers)
    assert_error(listing, 404, "NOT_FOUND")
    assert "internal note" not in listing.text
    for bad in (str(uuid.uuid4()), "not-an-id"):
        url = f"/api/v1/approvals/{bad}/comments"
        assert_error(await client.get(url, headers=org.admin.headers), 404, "NOT_FOUND")
        response = await client.post(url, headers=org.admin.headers, json={"body": "x"})
        assert_error(response, 404, "NOT_FOUND")
    # Their comment is still theirs alone.
    own = await client.get(
        f"/api/v1/approvals/{theirs['id']}/comments", headers=other_org.member.headers
    )
    assert [c["body"] for c in own.json()["data"]] == ["internal note"]
