"""The policy API: the document and its versions, what a rule's effect does to a new
request, budgets (race-safe), hostile documents, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from tests.conftest import Org, assert_error, create_approval

pytestmark = pytest.mark.anyio

REFUNDS = 'request.action_type == "refund.issue" && request.arguments.amount <= 50'


def rule(name: str, condition: str, effect: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "condition": condition, "effect": effect, **extra}


async def save(api: httpx.AsyncClient, org: Org, *rules: dict[str, Any]) -> httpx.Response:
    return await api.put("/api/v1/policies", json={"rules": list(rules)}, headers=org.admin.headers)


async def test_document_versions_and_restore(client: httpx.AsyncClient, org: Org) -> None:
    empty = (await client.get("/api/v1/policies", headers=org.admin.headers)).json()
    assert empty["version"] == 0 and empty["rules"] == []
    first = await save(client, org, rule("refunds", REFUNDS, "auto_approve"))
    assert first.status_code == 200, first.text
    assert first.json()["version"] == 1
    assert first.json()["author"]["id"] == org.admin.user_id
    second = await save(client, org, rule("all", "true", "auto_reject", reason="no"))
    assert second.json()["version"] == 2
    listed = (await client.get("/api/v1/policies/versions", headers=org.admin.headers)).json()
    assert [v["version"] for v in listed["data"]] == [2, 1]
    restored = await client.post("/api/v1/policies/versions/1/restore", headers=org.admin.headers)
    assert restored.json()["version"] == 3 and restored.json()["restored_from"] == 1
    now = (await client.get("/api/v1/policies", headers=org.admin.headers)).json()
    assert now["rules"][0]["name"] == "refunds"
    missing = await client.post("/api/v1/policies/versions/99/restore", headers=org.admin.headers)
    assert_error(missing, 404, "NOT_FOUND")


async def test_members_may_not_touch_policies(client: httpx.AsyncClient, org: Org) -> None:
    assert_error(await client.get("/api/v1/policies", headers=org.member.headers), 403, "FORBIDDEN")
    refused = await client.put("/api/v1/policies", json={"rules": []}, headers=org.member.headers)
    assert_error(refused, 403, "FORBIDDEN")


HOSTILE = [
    (rule("bad", "request.title ==", "auto_approve"), "line 1, column"),
    (rule("bad", "secret.key == 1", "auto_approve"), "unknown variable"),
    (rule("bad", "[1,2].all(x, x > 0)", "auto_approve"), "unknown variable"),
    (rule("bad", "(" * 40 + "true" + ")" * 40, "auto_approve"), "nested deeper"),
    (rule("bad", "true && " * 400 + "true", "auto_approve"), "at most 2000"),
    (rule("bad", "true", "auto_approve", budget={"per": "day", "max_count": -1}), "integer"),
    (rule("bad", "true", "auto_approve", budget={"per": "day", "max_count": 10**12}), "integer"),
    (
        rule(
            "bad",
            "true",
            "auto_approve",
            budget={"per": "day", "max_sum": 1e300, "sum_of": "amount"},
        ),
        "a number above 0",
    ),
    (rule("bad", "true", "auto_reject"), "reason"),
    (rule("bad", "true", "require", required_approvals=0), "integer 1 to 20"),
]


@pytest.mark.parametrize(("bad", "says"), HOSTILE)
async def test_hostile_documents_are_refused_and_nothing_is_stored(
    client: httpx.AsyncClient, org: Org, bad: dict[str, Any], says: str
) -> None:
    assert (await save(client, org, rule("ok", "true", "require", required_approvals=2))).is_success
    details = assert_error(await save(client, org, bad), 400, "VALIDATION_ERROR")
    assert details["fields"][0]["field"].startswith("rules.0")
    assert says in details["fields"][0]["message"]
    listed = (await client.get("/api/v1/policies/versions", headers=org.admin.headers)).json()
    assert len(listed["data"]) == 1


async def test_auto_approve_decides_at_create_with_receipt_and_callback(
    client: httpx.AsyncClient, org: Org
) -> None:
    assert (await save(client, org, rule("refunds", REFUNDS, "auto_approve"))).is_success
    created = await create_approval(
        client,
        org.member,
        action_type="refund.issue",
        arguments={"amount": 12},
        callback_url="http://127.0.0.1:9/hook",
    )
    assert created["status"] == "approved"
    assert created["auto_approved"] is True
    assert created["decided_by_name"] == "policy v1: refunds"
    read = (
        await client.get(f"/api/v1/approvals/{created['id']}", headers=org.admin.headers)
    ).json()
    assert read["receipt_issued"] is True
    events = await client.get(
        f"/api/v1/approvals/{created['id']}/events", headers=org.admin.headers
    )
    approved = [e for e in events.json()["data"] if e["type"] == "request.approved"]
    assert approved[0]["data"]["policy"] == {
        "rule": "refunds",
        "version": 1,
        "effect": "auto_approve",
    }
    deliveries = await client.get(
        f"/api/v1/webhooks?request_id={created['id']}", headers=org.admin.headers
    )
    assert deliveries.json()["data"], "the callback goes out as for a person's decision"
    # No match (an amount above 50), a missing key (no arguments): today's behaviour.
    big = await create_approval(
        client, org.member, action_type="refund.issue", arguments={"amount": 900}
    )
    assert big["status"] == "pending" and big["auto_approved"] is False
    bare = await create_approval(client, org.member, action_type="refund.issue")
    assert bare["status"] == "pending"


async def test_reject_require_escalate(client: httpx.AsyncClient, org: Org) -> None:
    rules = (
        rule("no-prod-fridays", 'request.source == "friday"', "auto_reject", reason="Not today"),
        rule("two-for-db", 'request.action_type == "db.migrate"', "require", required_approvals=2),
        rule("urgent", 'request.title.startsWith("URGENT")', "escalate", priority="critical"),
    )
    assert (await save(client, org, *rules)).is_success
    rejected = await create_approval(client, org.member, source="friday")
    assert rejected["status"] == "rejected" and rejected["auto_approved"] is False
    assert rejected["decision_comment"] == "Not today"
    required = await create_approval(client, org.member, action_type="db.migrate")
    assert required["status"] == "pending" and required["required_approvals"] == 2
    urgent = await create_approval(client, org.member, title="URGENT fix", priority="low")
    assert urgent["priority"] == "critical"


async def test_fifty_concurrent_creates_spend_a_budget_of_ten_exactly(
    client: httpx.AsyncClient, org: Org
) -> None:
    budget = {"per": "day", "scope": "action_type", "max_count": 10}
    saved = await save(client, org, rule("deploys", "true", "auto_approve", budget=budget))
    assert saved.is_success, saved.text
    members = [org.admin, *org.members]

    async def one(index: int) -> dict[str, Any]:
        return await create_approval(
            client, members[index % len(members)], action_type="deploy.staging"
        )

    created = await asyncio.gather(*(one(i) for i in range(50)))
    statuses = [c["status"] for c in created]
    assert statuses.count("approved") == 10
    assert statuses.count("pending") == 40
    pending = next(c for c in created if c["status"] == "pending")
    events = await client.get(
        f"/api/v1/approvals/{pending['id']}/events", headers=org.admin.headers
    )
    notes = [e for e in events.json()["data"] if e["type"] == "policy.budget_exhausted"]
    assert "budget spent" in notes[0]["data"]["budget"]


async def test_a_sum_budget_caps_the_amount(client: httpx.AsyncClient, org: Org) -> None:
    budget = {"per": "day", "max_sum": 100, "sum_of": "amount"}
    assert (
        await save(client, org, rule("refunds", "true", "auto_approve", budget=budget))
    ).is_success
    amounts = [60, 50, 40, 1]
    created = [
        await create_approval(client, org.member, arguments={"amount": amount})
        for amount in amounts
    ]
    assert [c["status"] for c in created] == ["approved", "pending", "approved", "pending"]


async def test_the_emergency_stop_comes_before_policies(
    client: httpx.AsyncClient, org: Org
) -> None:
    assert (await save(client, org, rule("everything", "true", "auto_approve"))).is_success
    stop = await client.put(
        "/api/v1/emergency-stop", json={"active": True}, headers=org.admin.headers
    )
    assert stop.status_code == 200, stop.text
    refused = await client.post(
        "/api/v1/approvals",
        json={"title": "t", "description": "d", "priority": "low"},
        headers=org.member.headers,
    )
    assert_error(refused, 503, "EMERGENCY_STOP")


async def test_escalate_sets_an_expiry(client: httpx.AsyncClient, org: Org) -> None:
    escalate = rule("soon", 'request.priority == "high"', "escalate", expires_in_seconds=600)
    assert (await save(client, org, escalate)).is_success
    created = await create_approval(client, org.member, priority="high")
    assert created["status"] == "pending" and created["expires_at"] is not None


async def test_a_key_in_use_sees_each_new_version_at_once(
    client: httpx.AsyncClient, org: Org
) -> None:
    """The version in force travels with the caller's principal, which a replica may
    remember: a save or a restore makes the next create of a key already in use follow
    the new document, with no stale verdict in between."""
    before = await create_approval(client, org.member, action_type="refund.issue")
    assert before["status"] == "pending"  # the member's principal now remembered
    assert (await save(client, org, rule("refunds", REFUNDS, "auto_approve"))).is_success
    ruled = await create_approval(
        client, org.member, action_type="refund.issue", arguments={"amount": 5}
    )
    assert ruled["status"] == "approved" and ruled["decided_by_name"] == "policy v1: refunds"
    assert (await save(client, org)).is_success  # version 2: no rules
    unruled = await create_approval(
        client, org.member, action_type="refund.issue", arguments={"amount": 5}
    )
    assert unruled["status"] == "pending"
    restored = await client.post("/api/v1/policies/versions/1/restore", headers=org.admin.headers)
    assert restored.is_success, restored.text
    again = await create_approval(
        client, org.member, action_type="refund.issue", arguments={"amount": 5}
    )
    assert again["status"] == "approved" and again["decided_by_name"] == "policy v3: refunds"
