"""GET /api/v1/approvals/:id: the whole request, scoping, and long polling with ?wait=N."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from signoff.app import create_app
from signoff.config import Settings
from signoff.context import AppContext
from signoff.storage import REQUEST_CHANNEL
from signoff.wiring import Wiring
from tests.conftest import Org, assert_error, create_approval, eventually
from tests.helpers import NO_SWEEP, backdate_expiry
from tests.storage.listen import starts_listening

# decisions.md 10 and 13: every field of the request, plus the read-only extras.
SINGLE_READ_FIELDS = {
    "id",
    "org_id",
    "connection_id",
    "title",
    "description",
    "status",
    "priority",
    "action_type",
    "source",
    "metadata",
    "callback_url",
    "required_approvals",
    "current_approvals",
    "is_sequential",
    "idempotency_key",
    "created_at",
    "updated_at",
    "expires_at",
    "decided_at",
    "decided_by",
    "decided_by_name",
    "decision_comment",
    "cancelled_at",
    "comments_count",
    # For existing clients (issue 23): false until approval policies exist.
    "auto_approved",
    # Its number in the org (#1234), as people name it.
    "number",
    # What the approver is shown, and its hash (null without one).
    "preview",
    "preview_hash",
}


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    # Long polls must return because of the decision or the deadline, not a re-check.
    return {**NO_SWEEP, "long_poll_recheck_seconds": 30.0}


def _rfc3339(value: datetime) -> str:
    return value.strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"


async def test_read_returns_every_field(client: httpx.AsyncClient, org: Org) -> None:
    expires = _rfc3339(datetime.now(UTC) + timedelta(hours=1))
    created = await create_approval(
        client,
        org.member,
        action_type="deploy.production",
        source="ci",
        metadata={"sha": "abc", "list": [1, 2]},
        callback_url="https://example.com/hook",
        callback_headers={"X-Receiver-Token": "top-secret-value"},
        expires_at=expires,
        required_approvals=2,
        idempotency_key="read-1",
    )
    response = await client.get(f"/api/v1/approvals/{created['id']}", headers=org.admin.headers)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    missing = SINGLE_READ_FIELDS - set(body)
    assert not missing, missing
    # The read shows the request as the create answer did.
    assert {k: body[k] for k in SINGLE_READ_FIELDS} == {k: created[k] for k in SINGLE_READ_FIELDS}
    assert body["id"] == created["id"]
    assert body["org_id"] == org.id
    assert body["connection_id"] == org.member.connection_id
    assert body["description"] == "Rolls out the new billing service to every region."
    assert body["metadata"] == {"sha": "abc", "list": [1, 2]}
    assert body["callback_url"] == "https://example.com/hook"
    assert body["expires_at"] == expires
    assert body["status"] == "pending"
    assert body["decided_at"] is None
    assert body["decided_by"] is None
    assert body["decided_by_name"] is None
    assert body["decision_comment"] is None
    assert body["cancelled_at"] is None
    assert body["created_at"].endswith("Z") and body["updated_at"].endswith("Z")
    # callback_headers may hold the receiver's credentials: never echoed.
    assert "callback_headers" not in body
    assert "top-secret-value" not in response.text


async def test_read_reflects_decision_and_comments(client: httpx.AsyncClient, org: Org) -> None:
    created = await create_approval(client, org.member)
    url = f"/api/v1/approvals/{created['id']}"
    await client.post(f"{url}/comments", headers=org.member.headers, json={"body": "Looks fine"})
    decided = await client.patch(
        url, headers=org.admin.headers, json={"decision": "approve", "comment": "Ship it"}
    )
    assert decided.status_code == 200, decided.text
    body = (await client.get(url, headers=org.member.headers)).json()
    assert body["status"] == "approved"
    assert body["decided_by"] == org.admin.user_id
    assert body["decided_by_name"] == org.admin.name
    assert body["decision_comment"] == "Ship it"
    assert body["decided_at"] == decided.json()["decided_at"]
    assert body["decided_at"].endswith("Z")
    # The approver's comment is a comment too.
    assert body["comments_count"] == 2
    assert body["current_approvals"] == 1


async def test_another_orgs_request_is_not_found(
    client: httpx.AsyncClient, org: Org, other_org: Org
) -> None:
    theirs = await create_approval(client, other_org.member)
    response = await client.get(f"/api/v1/approvals/{theirs['id']}", headers=org.admin.headers)
    assert_error(response, 404, "NOT_FOUND")
    # Same answer as for an id that names nothing at all.
    missing = await client.get(f"/api/v1/approvals/{uuid.uuid4()}", headers=org.admin.headers)
    assert_error(missing, 404, "NOT_FOUND")
    assert response.json()["error"]["message"] == missing.json()["error"]["message"]


@pytest.mark.parametrize("bad_id", ["not-a-uuid", "123", "00000000-0000-0000-0000", "%20"])
async def test_non_uuid_id_is_not_found(client: httpx.AsyncClient, org: Org, bad_id: str) -> None:
    response = await client.get(f"/api/v1/approvals/{bad_id}", headers=org.member.headers)
    assert_error(response, 404, "NOT_FOUND")


async def test_read_with_json_content_type_and_empty_body(
    client: httpx.AsyncClient, org: Org
) -> None:
    created = await create_approval(client, org.member)
    response = await client.get(
        f"/api/v1/approvals/{created['id']}",
        headers={**org.member.headers, "Content-Type": "application/json"},
    )
    assert response.status_code == 200


# ---- long polling ----


def _watched(wiring: Wiring) -> Callable[[], bool]:
    """A long poll has registered for wake-ups: a change from now on reaches it."""
    return lambda: len(wiring.waiters) == 1


async def test_wait_returns_as_soon_as_another_call_decides(
    client: httpx.AsyncClient, ctx: AppContext, wiring: Wiring, org: Org
) -> None:
    created = await create_approval(client, org.member)
    url = f"/api/v1/approvals/{created['id']}"
    started = time.monotonic()
    poll = asyncio.create_task(client.get(f"{url}?wait=20", headers=org.member.headers))
    await eventually(_watched(wiring), "the long poll to watch the request")
    assert not poll.done(), "the long poll answered while the request was still pending"
    decided = await client.patch(url, headers=org.admin.headers, json={"decision": "reject"})
    assert decided.status_code == 200
    response = await asyncio.wait_for(poll, 10)
    elapsed = time.monotonic() - started
    assert response.status_code == 200
    assert response.json()["status"] == "rejected"
    assert response.json()["decided_by"] == org.admin.user_id
    # Woken by the decision, far before the 20 s wait or the 30 s re-check.
    assert elapsed < 5


async def test_wait_wakes_on_cancel(
    client: httpx.AsyncClient, ctx: AppContext, wiring: Wiring, org: Org
) -> None:
    created = await create_approval(client, org.member)
    url = f"/api/v1/approvals/{created['id']}"
    poll = asyncio.create_task(client.get(url, params={"wait": "20"}, headers=org.admin.headers))
    await eventually(_watched(wiring), "the long poll to watch the request")
    assert (await client.delete(url, headers=org.member.headers)).status_code == 200
    response = await asyncio.wait_for(poll, 10)
    assert response.json()["status"] == "cancelled"


async def test_wait_returns_pending_after_n_seconds(client: httpx.AsyncClient, org: Org) -> None:
    created = await create_approval(client, org.member)
    started = time.monotonic()
    response = await client.get(
        f"/api/v1/approvals/{created['id']}?wait=1", headers=org.member.headers
    )
    elapsed = time.monotonic() - started
    assert response.status_code == 200
    assert response.json()["status"] == "pending"
    assert 0.95 <= elapsed < 5


async def test_wait_on_a_decided_request_returns_at_once(
    client: httpx.AsyncClient, org: Org
) -> None:
    created = await create_approval(client, org.member)
    url = f"/api/v1/approvals/{created['id']}"
    await client.patch(url, headers=org.admin.headers, json={"decision": "approve"})
    started = time.monotonic()
    response = await client.get(f"{url}?wait=30", headers=org.member.headers)
    assert time.monotonic() - started < 2
    assert response.json()["status"] == "approved"


async def test_wait_zero_and_empty_mean_no_wait(client: httpx.AsyncClient, org: Org) -> None:
    created = await create_approval(client, org.member)
    for query in ("?wait=0", "?wait=", "?wait=0.0"):
        started = time.monotonic()
        response = await client.get(
            f"/api/v1/approvals/{created['id']}{query}", headers=org.member.headers
        )
        assert response.status_code == 200
        assert time.monotonic() - started < 1


@pytest.mark.parametrize("wait", ["abc", "-1", "61", "1e9", "nan", "inf", "1s"])
async def test_invalid_wait_is_400(client: httpx.AsyncClient, org: Org, wait: str) -> None:
    created = await create_approval(client, org.member)
    response = await client.get(
        f"/api/v1/approvals/{created['id']}", params={"wait": wait}, headers=org.member.headers
    )
    details = assert_error(response, 400, "VALIDATION_ERROR")
    assert details["fields"][0]["field"] == "wait"


async def test_wait_on_another_orgs_request_is_404_at_once(
    client: httpx.AsyncClient, org: Org, other_org: Org
) -> None:
    theirs = await create_approval(client, other_org.member)
    started = time.monotonic()
    response = await client.get(
        f"/api/v1/approvals/{theirs['id']}?wait=10", headers=org.member.headers
    )
    assert_error(response, 404, "NOT_FOUND")
    assert time.monotonic() - started < 2


async def test_expiry_during_the_wait_returns_expired(client: httpx.AsyncClient, org: Org) -> None:
    expires_at = datetime.now(UTC) + timedelta(seconds=1.2)
    created = await create_approval(client, org.member, expires_at=_rfc3339(expires_at))
    started = time.monotonic()
    response = await client.get(
        f"/api/v1/approvals/{created['id']}?wait=20", headers=org.member.headers
    )
    elapsed = time.monotonic() - started
    body = response.json()
    assert body["status"] == "expired"
    # Expired at its deadline, noticed without the sweep (off here) or a re-check (30 s).
    assert body["decided_at"] == body["expires_at"]
    assert body["decided_by"] is None
    assert elapsed < 5


async def test_past_deadline_reads_expired_without_waiting(
    client: httpx.AsyncClient, org: Org, ctx: AppContext
) -> None:
    created = await create_approval(
        client, org.member, expires_at=_rfc3339(datetime.now(UTC) + timedelta(hours=1))
    )
    await backdate_expiry(ctx, created["id"])
    started = time.monotonic()
    response = await client.get(
        f"/api/v1/approvals/{created['id']}?wait=20", headers=org.member.headers
    )
    assert response.json()["status"] == "expired"
    assert time.monotonic() - started < 2


@pytest.mark.usefixtures("postgres_only")
async def test_wait_wakes_on_a_decision_made_by_another_process(
    client: httpx.AsyncClient, ctx: AppContext, wiring: Wiring, org: Org, settings: Settings
) -> None:
    """Another replica's decision wakes the poll at once on PostgreSQL (LISTEN/NOTIFY),
    not at its next periodic re-read (30 s here). (On SQLite other processes' decisions
    are noticed by that re-read.)"""
    created = await create_approval(client, org.member)
    url = f"/api/v1/approvals/{created['id']}"
    # The first long poll of a process opens its LISTEN connection.
    async with starts_listening(settings.database_url, REQUEST_CHANNEL):
        poll = asyncio.create_task(client.get(f"{url}?wait=20", headers=org.member.headers))
        await eventually(_watched(wiring), "the long poll to watch the request")
    assert not poll.done()
    replica = Wiring.from_settings(settings)
    try:
        transport = httpx.ASGITransport(app=create_app(settings, wiring=replica, background=False))
        async with httpx.AsyncClient(transport=transport, base_url="http://replica") as other:
            decided_at = time.monotonic()
            decided = await other.patch(
                url, headers=org.admin.headers, json={"decision": "approve"}
            )
            assert decided.status_code == 200, decided.text
        response = await asyncio.wait_for(poll, 10)
        woken_after = time.monotonic() - decided_at
    finally:
        await replica.close()
    assert response.json()["status"] == "approved"
    assert woken_after < 2.0
