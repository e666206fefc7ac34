"""Standing approvals beside everything else at create, one test per row of the table in
docs/policies.md (*Interplay*): the emergency stop, then policies, then standing
approvals, then people; four-eyes binds people only. On SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.conftest import Org, approval_body, assert_error
from tests.standing.support import DEPLOY, GRANT, decide, grant, request, standing_list

pytestmark = pytest.mark.anyio

STAGING = 'request.action_type == "deploy.staging"'


async def policy(client: httpx.AsyncClient, org: Org, effect: str, **extra: Any) -> None:
    rules = [{"name": "staging", "condition": STAGING, "effect": effect, **extra}]
    saved = await client.put("/api/v1/policies", json={"rules": rules}, headers=org.admin.headers)
    assert saved.status_code == 200, saved.text


async def uses(client: httpx.AsyncClient, org: Org) -> int:
    (listed,) = await standing_list(client, org.admin)
    return int(listed["uses"])


async def test_the_emergency_stop_comes_first(client: httpx.AsyncClient, org: Org) -> None:
    await grant(client, org.members[0], org.admin)
    stop = await client.put(
        "/api/v1/emergency-stop", json={"active": True}, headers=org.admin.headers
    )
    assert stop.status_code == 200, stop.text
    refused = await client.post(
        "/api/v1/approvals", json=approval_body(**DEPLOY), headers=org.members[0].headers
    )
    assert_error(refused, 503, "EMERGENCY_STOP")
    assert await uses(client, org) == 0


async def test_a_policy_approval_comes_before_it(client: httpx.AsyncClient, org: Org) -> None:
    await grant(client, org.members[0], org.admin)
    await policy(client, org, "auto_approve")
    created = await request(client, org.members[0])
    assert created["status"] == "approved" and created["decided_by_name"] == "policy v1: staging"
    assert created["standing_approval_id"] is None
    assert await uses(client, org) == 0


async def test_a_policy_rejection_comes_before_it(client: httpx.AsyncClient, org: Org) -> None:
    await grant(client, org.members[0], org.admin)
    await policy(client, org, "auto_reject", reason="Frozen")
    created = await request(client, org.members[0])
    assert created["status"] == "rejected" and created["decision_comment"] == "Frozen"
    assert await uses(client, org) == 0


async def test_a_policy_quorum_keeps_people_in(client: httpx.AsyncClient, org: Org) -> None:
    await grant(client, org.members[0], org.admin)
    await policy(client, org, "require", required_approvals=2)
    created = await request(client, org.members[0])
    assert created["status"] == "pending" and created["required_approvals"] == 2
    assert await uses(client, org) == 0


async def test_an_escalation_to_critical_keeps_people_in(
    client: httpx.AsyncClient, org: Org
) -> None:
    await grant(client, org.members[0], org.admin)
    await policy(client, org, "escalate", priority="critical")
    created = await request(client, org.members[0])
    assert created["status"] == "pending" and created["priority"] == "critical"
    assert await uses(client, org) == 0


async def test_another_escalation_is_then_approved_by_it(
    client: httpx.AsyncClient, org: Org
) -> None:
    sid = await grant(client, org.members[0], org.admin)
    await policy(client, org, "escalate", expires_in_seconds=600)
    created = await request(client, org.members[0])
    assert created["status"] == "approved" and created["standing_approval_id"] == sid


async def test_a_spent_budget_falls_through_to_it(client: httpx.AsyncClient, org: Org) -> None:
    sid = await grant(client, org.members[0], org.admin)
    await policy(client, org, "auto_approve", budget={"per": "day", "max_count": 1})
    first = await request(client, org.members[0])
    assert first["decided_by_name"] == "policy v1: staging"
    second = await request(client, org.members[0])
    assert second["status"] == "approved" and second["standing_approval_id"] == sid
    events = await client.get(f"/api/v1/approvals/{second['id']}/events", headers=org.admin.headers)
    kinds = [e["type"] for e in events.json()["data"]]
    assert kinds == ["request.created", "policy.budget_exhausted", "request.approved"]


async def test_no_policy_match_then_it_approves(client: httpx.AsyncClient, org: Org) -> None:
    sid = await grant(client, org.members[0], org.admin)
    saved = await client.put(
        "/api/v1/policies",
        json={"rules": [{"name": "prod", "condition": 'request.action_type == "x"',
                         "effect": "auto_reject", "reason": "no"}]},
        headers=org.admin.headers,
    )  # fmt: skip
    assert saved.status_code == 200
    created = await request(client, org.members[0])
    assert created["status"] == "approved" and created["standing_approval_id"] == sid


async def test_four_eyes_binds_the_grantor_not_the_grant(
    client: httpx.AsyncClient, org: Org
) -> None:
    forbid = await client.patch(
        "/api/v1/org/settings", json={"self_approval": "forbid"}, headers=org.admin.headers
    )
    assert forbid.status_code == 200, forbid.text
    requester = org.members[0]
    own = await request(client, requester)
    refused = await decide(client, requester, own["id"], standing=GRANT)
    assert_error(refused, 403, "SELF_APPROVAL_FORBIDDEN")
    assert await standing_list(client, org.admin) == []
    sid = await grant(client, requester, org.admin)
    created = await request(client, requester)
    assert created["status"] == "approved" and created["standing_approval_id"] == sid


async def test_a_critical_request_never_matches(client: httpx.AsyncClient, org: Org) -> None:
    await grant(client, org.members[0], org.admin)
    created = await request(client, org.members[0], priority="critical")
    assert created["status"] == "pending"
    assert await uses(client, org) == 0
