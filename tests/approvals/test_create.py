"""POST /api/v1/approvals: the created shape, every validation rule, idempotency."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from tests.conftest import Org, approval_body, assert_error, create_approval


async def test_create_returns_the_whole_request(client: httpx.AsyncClient, org: Org) -> None:
    expires = (datetime.now(UTC) + timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    response = await client.post(
        "/api/v1/approvals",
        headers=org.member.headers,
        json=approval_body(
            action_type="deploy.production",
            source="github-actions",
            metadata={"sha": "abc123", "nested": {"n": 1}},
            callback_url="https://example.com/hook",
            callback_headers={"X-Token": "s3cret"},
            expires_at=expires,
            required_approvals=2,
            is_sequential=True,
            idempotency_key="deploy-42",
        ),
    )
    assert response.status_code == 201, response.text
    body = response.json()
    assert body["status"] == "pending"
    assert body["org_id"] == org.id
    assert body["connection_id"] == org.member.connection_id
    assert body["title"] == "Deploy v2 to production"
    assert body["priority"] == "high"
    assert body["action_type"] == "deploy.production"
    assert body["source"] == "github-actions"
    assert body["metadata"] == {"sha": "abc123", "nested": {"n": 1}}
    assert body["required_approvals"] == 2
    assert body["current_approvals"] == 0
    assert body["is_sequential"] is True
    assert body["expires_at"] == expires
    assert body["idempotency_key"] == "deploy-42"
    assert body["decided_at"] is None and body["decided_by"] is None
    assert body["created_at"].endswith("Z")
    assert body["comments_count"] == 0
    # callback_headers may hold secrets: never echoed, on create or on reads.
    assert "callback_headers" not in body
    read = await client.get(f"/api/v1/approvals/{body['id']}", headers=org.member.headers)
    assert "callback_headers" not in read.json()
    assert "s3cret" not in read.text


async def test_defaults(client: httpx.AsyncClient, org: Org) -> None:
    body = await create_approval(client, org.member)
    assert body["required_approvals"] == 1
    assert body["is_sequential"] is False
    assert body["metadata"] == {}
    assert body["expires_at"] is None and body["action_type"] is None


async def test_null_and_empty_optional_fields_mean_not_given(
    client: httpx.AsyncClient, org: Org
) -> None:
    body = await create_approval(
        client,
        org.member,
        callback_url="",
        action_type=None,
        metadata=None,
        expires_at="",
        required_approvals=None,
        idempotency_key="",
        some_future_field={"ignored": True},
    )
    assert body["required_approvals"] == 1
    assert body["callback_url"] is None
    assert body["idempotency_key"] is None


INVALID_BODIES: list[tuple[dict[str, Any], str]] = [
    ({"title": None}, "title"),
    ({"title": ""}, "title"),
    ({"title": "   "}, "title"),
    ({"title": "x" * 201}, "title"),
    ({"title": 12}, "title"),
    ({"description": ""}, "description"),
    ({"description": "x" * 10_001}, "description"),
    ({"priority": "urgent"}, "priority"),
    ({"priority": None}, "priority"),
    ({"action_type": "Deploy Prod"}, "action_type"),
    ({"action_type": "deploy..prod"}, "action_type"),
    ({"action_type": "a" * 101}, "action_type"),
    ({"source": "s" * 101}, "source"),
    ({"metadata": [1, 2]}, "metadata"),
    ({"metadata": {"blob": "x" * 70_000}}, "metadata"),
    ({"callback_url": "ftp://example.com/x"}, "callback_url"),
    ({"callback_url": "not a url"}, "callback_url"),
    ({"callback_url": "https://user:pw@example.com/"}, "callback_url"),
    ({"callback_headers": {"Content-Type": "text/plain"}}, "callback_headers"),
    ({"callback_headers": {"X-Service-Signature": "forged"}}, "callback_headers"),
    ({"callback_headers": {"webhook-signature": "forged"}}, "callback_headers"),
    ({"callback_headers": {"Bad Header": "v"}}, "callback_headers"),
    ({"callback_headers": {"X-A": "line\r\nbreak"}}, "callback_headers"),
    ({"callback_headers": {"X-A": "v" * 1025}}, "callback_headers"),
    ({"callback_headers": {f"X-H{i}": "v" for i in range(21)}}, "callback_headers"),
    ({"callback_headers": {"X-A": 5}}, "callback_headers.X-A"),
    ({"expires_at": "2030-01-01T00:00:00"}, "expires_at"),
    ({"expires_at": "2001-01-01T00:00:00Z"}, "expires_at"),
    ({"expires_at": "tomorrow"}, "expires_at"),
    ({"expires_at": 1893456000}, "expires_at"),
    ({"required_approvals": 0}, "required_approvals"),
    ({"required_approvals": 21}, "required_approvals"),
    ({"required_approvals": True}, "required_approvals"),
    ({"required_approvals": 1.5}, "required_approvals"),
    ({"is_sequential": "maybe"}, "is_sequential"),
    ({"idempotency_key": "k" * 256}, "idempotency_key"),
]


@pytest.mark.parametrize(("overrides", "field"), INVALID_BODIES)
async def test_validation_errors_name_the_field(
    client: httpx.AsyncClient, org: Org, overrides: dict[str, Any], field: str
) -> None:
    response = await client.post(
        "/api/v1/approvals", headers=org.member.headers, json=approval_body(**overrides)
    )
    details = assert_error(response, 400, "VALIDATION_ERROR")
    assert field in [f["field"] for f in details["fields"]], details


@pytest.mark.parametrize("missing", ["title", "description", "priority"])
async def test_required_fields(client: httpx.AsyncClient, org: Org, missing: str) -> None:
    body = approval_body()
    del body[missing]
    response = await client.post("/api/v1/approvals", headers=org.member.headers, json=body)
    details = assert_error(response, 400, "VALIDATION_ERROR")
    assert details["fields"][0]["field"] == missing


@pytest.mark.parametrize(
    "raw", [b"{not json", b"[1, 2]", b'"a string"', b"", b"\xff\xfe"], ids=repr
)
async def test_malformed_bodies_are_validation_errors(
    client: httpx.AsyncClient, org: Org, raw: bytes
) -> None:
    response = await client.post(
        "/api/v1/approvals",
        headers={**org.member.headers, "Content-Type": "application/json"},
        content=raw,
    )
    assert_error(response, 400, "VALIDATION_ERROR")


async def test_body_over_one_mebibyte_is_413(client: httpx.AsyncClient, org: Org) -> None:
    big = approval_body(description="x" * (1024 * 1024 + 1))
    response = await client.post("/api/v1/approvals", headers=org.member.headers, json=big)
    assert_error(response, 413, "PAYLOAD_TOO_LARGE")
    assert "x-ratelimit-limit" in response.headers


async def test_idempotent_replay_returns_the_first_request(
    client: httpx.AsyncClient, org: Org
) -> None:
    first = await create_approval(client, org.member, idempotency_key="once")
    replay = await client.post(
        "/api/v1/approvals",
        headers=org.member.headers,
        json=approval_body(title="A different title", idempotency_key="once"),
    )
    assert replay.status_code == 200
    assert replay.headers["idempotent-replayed"] == "true"
    assert replay.json()["id"] == first["id"]
    assert replay.json()["title"] == first["title"]
    listing = await client.get("/api/v1/approvals", headers=org.member.headers)
    assert listing.json()["pagination"]["total"] == 1


async def test_idempotency_keys_are_per_org_and_outlive_decisions(
    client: httpx.AsyncClient, org: Org, other_org: Org
) -> None:
    ours = await create_approval(client, org.member, idempotency_key="shared")
    theirs = await create_approval(client, other_org.member, idempotency_key="shared")
    assert ours["id"] != theirs["id"]
    await client.delete(f"/api/v1/approvals/{ours['id']}", headers=org.member.headers)
    replay = await client.post(
        "/api/v1/approvals", headers=org.admin.headers, json=approval_body(idempotency_key="shared")
    )
    assert replay.status_code == 200
    assert replay.json()["status"] == "cancelled"


async def test_concurrent_creates_with_one_key_make_one_request(
    client: httpx.AsyncClient, org: Org
) -> None:
    async def create() -> httpx.Response:
        return await client.post(
            "/api/v1/approvals",
            headers=org.member.headers,
            json=approval_body(idempotency_key="race"),
        )

    responses = await asyncio.gather(*(create() for _ in range(20)))
    codes = sorted(r.status_code for r in responses)
    assert codes == [200] * 19 + [201]
    assert len({r.json()["id"] for r in responses}) == 1
    listing = await client.get("/api/v1/approvals", headers=org.member.headers)
    assert listing.json()["pagination"]["total"] == 1
    # The losers wrote no event either (on PostgreSQL the event is inserted by the
    # request's own statement, from the row it inserted).
    events = await client.get(
        f"/api/v1/approvals/{responses[0].json()['id']}/events", headers=org.admin.headers
    )
    assert [event["type"] for event in events.json()["data"]] == ["request.created"]
