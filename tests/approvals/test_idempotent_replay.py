"""Replays of a create (decisions.md 4): 200 with the first request "whatever the body",
even when the retried body would no longer validate, as when its deadline passed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import httpx

from tests.conftest import Org, approval_body, assert_error, create_approval


async def test_a_retry_after_the_deadline_passed_replays(
    client: httpx.AsyncClient, org: Org
) -> None:
    soon = (datetime.now(UTC) + timedelta(minutes=5)).isoformat()
    first = await create_approval(client, org.member, idempotency_key="job-7", expires_at=soon)
    # The same call, retried once its expires_at lies in the past.
    passed = (datetime.now(UTC) - timedelta(minutes=1)).isoformat()
    retry = await client.post(
        "/api/v1/approvals",
        headers=org.member.headers,
        json=approval_body(idempotency_key="job-7", expires_at=passed),
    )
    assert retry.status_code == 200, retry.text
    assert retry.headers["idempotent-replayed"] == "true"
    assert retry.json()["id"] == first["id"]
    assert retry.json()["expires_at"] == first["expires_at"]


async def test_any_body_with_a_used_key_replays(client: httpx.AsyncClient, org: Org) -> None:
    first = await create_approval(client, org.member, idempotency_key="k1")
    for body in ({"idempotency_key": "k1"}, {"idempotency_key": "k1", "priority": "urgent"}):
        retry = await client.post("/api/v1/approvals", headers=org.admin.headers, json=body)
        assert retry.status_code == 200, retry.text
        assert retry.json()["id"] == first["id"]
    listing = await client.get("/api/v1/approvals", headers=org.member.headers)
    assert listing.json()["total"] == 1


async def test_invalid_bodies_without_a_used_key_are_still_400(
    client: httpx.AsyncClient, org: Org, other_org: Org
) -> None:
    await create_approval(client, other_org.member, idempotency_key="theirs")
    for body in (
        {"title": "t"},
        {"idempotency_key": "unused"},
        {"idempotency_key": "theirs"},  # another org's key is not ours
        {"idempotency_key": 5, "title": "t"},
        {"idempotency_key": "", "title": "t"},
    ):
        response = await client.post("/api/v1/approvals", headers=org.member.headers, json=body)
        assert_error(response, 400, "VALIDATION_ERROR")
