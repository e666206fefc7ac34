"""The dry run on a seeded history, checked against a count made by hand."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.conftest import Org, assert_error, create_approval

pytestmark = pytest.mark.anyio

# (action_type, amount, what a person decided), in the order they were created.
HISTORY = [
    ("refund.issue", 10, "approve"),
    ("refund.issue", 20, "reject"),
    ("refund.issue", 30, "approve"),
    ("refund.issue", 40, "approve"),
    ("refund.issue", 500, "approve"),
    ("refund.issue", 5, "reject"),
    ("deploy.prod", 0, "approve"),
    ("deploy.prod", 0, "reject"),
]
DRAFT: dict[str, Any] = {
    "rules": [
        {
            "name": "small-refunds",
            "condition": 'request.action_type == "refund.issue" && request.arguments.amount <= 50',
            "effect": "auto_approve",
            "budget": {"per": "day", "max_count": 3},
        },
        {
            "name": "no-prod",
            "condition": 'request.action_type == "deploy.prod"',
            "effect": "auto_reject",
            "reason": "frozen",
        },
    ]
}


async def test_dry_run_matches_a_count_by_hand(client: httpx.AsyncClient, org: Org) -> None:
    ids = []
    for action_type, amount, decision in HISTORY:
        created = await create_approval(
            client, org.member, action_type=action_type, arguments={"amount": amount}
        )
        decided = await client.patch(
            f"/api/v1/approvals/{created['id']}",
            json={"decision": decision},
            headers=org.admin.headers,
        )
        assert decided.status_code == 200, decided.text
        ids.append(created["id"])
    await create_approval(client, org.member, action_type="refund.issue")  # pending: not replayed
    answer = await client.post(
        "/api/v1/policies/dry-run", json={**DRAFT, "days": 7}, headers=org.admin.headers
    )
    assert answer.status_code == 200, answer.text
    body = answer.json()
    # By hand: the refunds of 10, 20, 30 spend the budget of 3; 40 and 5 match but go to
    # people; 500 matches nothing; both deploys are auto-rejected.
    assert body["requests"] == 8
    assert body["rules"] == [
        {"name": "small-refunds", "effect": "auto_approve", "matched": 5},
        {"name": "no-prod", "effect": "auto_reject", "matched": 2},
    ]
    assert body["decisions"] == {
        "auto_approve": 3,
        "auto_reject": 2,
        "require": 0,
        "escalate": 0,
        "people": 3,
    }
    # The refund of 20 a person rejected; the deploy a person approved.
    assert body["disagreement_count"] == 2
    assert [(d["request_id"], d["would_have"]) for d in body["disagreements"]] == [
        (ids[1], "auto_approve"),
        (ids[6], "auto_reject"),
    ]
    assert body["disagreements"][0]["link"] == f"/requests/{ids[1]}"
    (exhausted,) = body["budgets_exhausted"]
    assert exhausted["rule"] == "small-refunds"
    stored = await client.get("/api/v1/policies", headers=org.admin.headers)
    assert stored.json()["version"] == 0, "a dry run stores nothing"


async def test_dry_run_refuses_a_broken_draft(client: httpx.AsyncClient, org: Org) -> None:
    broken = {"rules": [{"name": "x", "condition": "request.", "effect": "auto_approve"}]}
    response = await client.post("/api/v1/policies/dry-run", json=broken, headers=org.admin.headers)
    assert_error(response, 400, "VALIDATION_ERROR")
    bad_days = await client.post(
        "/api/v1/policies/dry-run", json={"rules": [], "days": -3}, headers=org.admin.headers
    )
    assert_error(bad_days, 400, "VALIDATION_ERROR")


async def test_dry_run_reads_metadata_connections_and_scopes_budgets_per_connection(
    client: httpx.AsyncClient, org: Org
) -> None:
    """Conditions on metadata and the connection's name, a budget per connection: the
    history's JSON, connection ids and names come back from storage as a create sees them."""
    first, second = org.members[0], org.members[1]
    for who, team in ((first, "ops"), (first, "ops"), (second, "ops"), (first, "web")):
        created = await create_approval(
            client, who, action_type="refund.issue", metadata={"team": team}
        )
        decided = await client.patch(
            f"/api/v1/approvals/{created['id']}",
            json={"decision": "approve"},
            headers=org.admin.headers,
        )
        assert decided.status_code == 200, decided.text
    draft = {
        "rules": [
            {
                "name": "ops-from-known-connections",
                "condition": 'request.metadata.team == "ops" && '
                'request.connection.name.startsWith("conn-")',
                "effect": "auto_approve",
                "budget": {"per": "day", "max_count": 1, "scope": "connection"},
            }
        ],
        "days": 1,
    }
    answer = await client.post("/api/v1/policies/dry-run", json=draft, headers=org.admin.headers)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    # By hand: three "ops" requests match; each connection's budget of one approves its
    # first; the second of the first connection goes to people; "web" matches nothing.
    assert body["rules"][0]["matched"] == 3
    assert body["decisions"]["auto_approve"] == 2
    assert body["decisions"]["people"] == 2
    (exhausted,) = body["budgets_exhausted"]
    assert exhausted["scope_key"] == first.connection_id
