"""GET /api/v1/approvals/:id/events: the audit trail, one event per change, atomically."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from signoff.approvals.repository import ApprovalRepository
from signoff.context import AppContext
from signoff.models import AuditEvent
from signoff.wiring import Wiring
from signoff.worker.sweeper import sweep_expired_once
from tests.conftest import Org, assert_error, create_approval
from tests.helpers import NO_SWEEP, backdate_expiry, stored_events, stored_request

EVENT_FIELDS = {"id", "request_id", "type", "actor_id", "data", "created_at"}


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    return NO_SWEEP


async def _events(client: httpx.AsyncClient, org: Org, request_id: str) -> list[dict[str, Any]]:
    response = await client.get(f"/api/v1/approvals/{request_id}/events", headers=org.admin.headers)
    assert response.status_code == 200, response.text
    data: list[dict[str, Any]] = response.json()["data"]
    return data


async def test_a_whole_life_in_order(client: httpx.AsyncClient, org: Org) -> None:
    created = await create_approval(client, org.member, required_approvals=2, source="ci")
    url = f"/api/v1/approvals/{created['id']}"
    await client.post(f"{url}/comments", headers=org.members[1].headers, json={"body": "Hmm"})
    await client.patch(url, headers=org.members[0].headers, json={"decision": "approve"})
    await client.patch(
        url,
        headers=org.admin.headers,
        json={"decision": "approve", "comment": "Go", "source": "ui"},
    )
    events = await _events(client, org, created["id"])
    assert all(set(e) == EVENT_FIELDS for e in events)
    assert all(e["request_id"] == created["id"] for e in events)
    assert [(e["type"], e["actor_id"]) for e in events] == [
        ("request.created", org.member.user_id),
        ("comment.created", org.members[1].user_id),
        ("request.vote_recorded", org.members[0].user_id),
        ("comment.created", org.admin.user_id),
        ("request.approved", org.admin.user_id),
    ]
    created_event, comment, vote, _, approved = events
    assert created_event["data"] == {"title": created["title"], "priority": "high", "source": "ci"}
    assert comment["data"]["body"] == "Hmm"
    assert vote["data"] == {
        "status": "pending",
        "current_approvals": 1,
        "required_approvals": 2,
        "decision": "approve",
    }
    assert approved["data"] == {
        "status": "approved",
        "current_approvals": 2,
        "required_approvals": 2,
        "decision": "approve",
        "comment": "Go",
        "source": "ui",
    }
    stamps = [e["created_at"] for e in events]
    assert stamps == sorted(stamps)
    assert len({e["id"] for e in events}) == len(events)


async def test_cancellation_and_rejection_events(client: httpx.AsyncClient, org: Org) -> None:
    cancelled = await create_approval(client, org.member)
    rejected = await create_approval(client, org.member)
    await client.delete(f"/api/v1/approvals/{cancelled['id']}", headers=org.admin.headers)
    await client.patch(
        f"/api/v1/approvals/{rejected['id']}",
        headers=org.member.headers,
        json={"decision": "reject"},
    )
    cancel_events = await _events(client, org, cancelled["id"])
    assert [(e["type"], e["actor_id"]) for e in cancel_events] == [
        ("request.created", org.member.user_id),
        ("request.cancelled", org.admin.user_id),
    ]
    assert cancel_events[1]["data"]["status"] == "cancelled"
    reject_events = await _events(client, org, rejected["id"])
    assert [e["type"] for e in reject_events] == ["request.created", "request.rejected"]
    assert reject_events[1]["data"]["decision"] == "reject"


async def test_expiry_event_has_no_actor(
    api_only: httpx.AsyncClient, org: Org, ctx: AppContext, wiring: Wiring
) -> None:
    expires = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    created = await create_approval(api_only, org.member, expires_at=expires)
    await backdate_expiry(ctx, created["id"])
    # Reads show it expired, but nothing is written until the sweep does it.
    assert [e["type"] for e in await _events(api_only, org, created["id"])] == ["request.created"]
    assert await sweep_expired_once(ctx, wiring.poisoned) == 1
    events = await _events(api_only, org, created["id"])
    assert [(e["type"], e["actor_id"]) for e in events] == [
        ("request.created", org.member.user_id),
        ("request.expired", None),
    ]
    assert events[1]["data"]["status"] == "expired"


async def test_refusals_write_no_event(
    client: httpx.AsyncClient, org: Org, ctx: AppContext
) -> None:
    created = await create_approval(client, org.member, required_approvals=2)
    url = f"/api/v1/approvals/{created['id']}"
    await client.patch(url, headers=org.member.headers, json={"decision": "approve"})
    before = await stored_events(ctx, created["id"])
    refused = [
        await client.patch(url, headers=org.member.headers, json={"decision": "approve"}),
        await client.patch(url, headers=org.admin.headers, json={"decision": "maybe"}),
        await client.post(f"{url}/comments", headers=org.admin.headers, json={"body": ""}),
    ]
    assert [r.status_code for r in refused] == [409, 400, 400]
    await client.delete(url, headers=org.admin.headers)
    assert (await client.delete(url, headers=org.admin.headers)).status_code == 409
    after = await stored_events(ctx, created["id"])
    assert [e["type"] for e in after] == [e["type"] for e in before] + ["request.cancelled"]


async def test_a_failed_event_write_rolls_the_change_back(
    client: httpx.AsyncClient, org: Org, ctx: AppContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The state change and its event commit together or not at all."""
    created = await create_approval(client, org.member)
    url = f"/api/v1/approvals/{created['id']}"
    original = ApprovalRepository.add_event

    async def add_event_failing_on_approval(self: ApprovalRepository, event: AuditEvent) -> None:
        if event.type == "request.approved":
            raise RuntimeError("disk full")
        await original(self, event)

    monkeypatch.setattr(ApprovalRepository, "add_event", add_event_failing_on_approval)
    response = await client.patch(
        url, headers=org.admin.headers, json={"decision": "approve", "comment": "ok"}
    )
    assert_error(response, 500, "INTERNAL_ERROR")
    assert "disk full" not in response.text
    stored = await stored_request(ctx, created["id"])
    assert (stored.status, stored.current_approvals, stored.comments_count) == ("pending", 0, 0)
    assert [e["type"] for e in await stored_events(ctx, created["id"])] == ["request.created"]
    comments = await client.get(f"{url}/comments", headers=org.admin.headers)
    assert comments.json()["data"] == []
    monkeypatch.undo()
    # Nothing half-done is left behind: the same user may still vote.
    retry = await client.patch(url, headers=org.admin.headers, json={"decision": "approve"})
    assert retry.json()["status"] == "approved"


async def test_events_of_another_orgs_request_are_404(
    client: httpx.AsyncClient, org: Org, other_org: Org
) -> None:
    theirs = await create_approval(client, other_org.member)
    for request_id in (theirs["id"], str(uuid.uuid4()), "nope"):
        response = await client.get(
            f"/api/v1/approvals/{request_id}/events", headers=org.admin.headers
        )
        assert_error(response, 404, "NOT_FOUND")
