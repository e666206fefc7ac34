"""Grants that are refused: 400 VALIDATION_ERROR with the envelope, the decision not
made, nothing stored, on SQLite and PostgreSQL; and the admins' caps (org settings)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from signoff.context import AppContext
from tests.conftest import Org, assert_error
from tests.standing.support import decide, org_events, request, standing_list

pytestmark = pytest.mark.anyio

OK_ARGS = {"env": {"eq": "staging"}}

# (what, the request's overrides, the decision body's overrides)
HOSTILE: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("critical request", {"priority": "critical"}, {"standing": {"ttl_seconds": 60}}),
    ("a quorum", {"required_approvals": 2}, {"standing": {"ttl_seconds": 60}}),
    ("no action type", {"action_type": None}, {"standing": {"ttl_seconds": 60}}),
    ("on a reject", {}, {"decision": "reject", "standing": {"ttl_seconds": 60}}),
    ("neither ttl nor uses", {}, {"standing": {"arguments": OK_ARGS}}),
    ("zero ttl", {}, {"standing": {"ttl_seconds": 0}}),
    ("negative ttl", {}, {"standing": {"ttl_seconds": -5}}),
    ("enormous ttl", {}, {"standing": {"ttl_seconds": 10**15}}),
    ("fractional ttl", {}, {"standing": {"ttl_seconds": 1.5}}),
    ("boolean ttl", {}, {"standing": {"ttl_seconds": True}}),
    ("string uses", {}, {"standing": {"max_uses": "5"}}),
    ("zero uses", {}, {"standing": {"max_uses": 0}}),
    ("enormous uses", {}, {"standing": {"max_uses": 10**12}}),
    ("unknown key", {}, {"standing": {"ttl_seconds": 60, "forever": True}}),
    ("not an object", {}, {"standing": "yes"}),
    (
        "missing argument",
        {},
        {"standing": {"ttl_seconds": 60, "arguments": {"region": {"eq": "eu"}}}},
    ),
    (
        "max on a string argument",
        {},
        {"standing": {"ttl_seconds": 60, "arguments": {"env": {"max": 5}}}},
    ),
    (
        "max not a number",
        {},
        {"standing": {"ttl_seconds": 60, "arguments": {"replicas": {"max": "5"}}}},
    ),
    (
        "max enormous",
        {},
        {"standing": {"ttl_seconds": 60, "arguments": {"replicas": {"max": 1e300}}}},
    ),
    (
        "max a boolean",
        {},
        {"standing": {"ttl_seconds": 60, "arguments": {"replicas": {"max": True}}}},
    ),
    (
        "the request breaks its own constraint",
        {},
        {"standing": {"ttl_seconds": 60, "arguments": {"replicas": {"max": 2}}}},
    ),
    (
        "eq not the request's",
        {},
        {"standing": {"ttl_seconds": 60, "arguments": {"env": {"eq": "production"}}}},
    ),
    (
        "unknown operator",
        {},
        {"standing": {"ttl_seconds": 60, "arguments": {"replicas": {"min": 1}}}},
    ),
    (
        "two operators",
        {},
        {"standing": {"ttl_seconds": 60, "arguments": {"replicas": {"max": 5, "eq": 3}}}},
    ),
    (
        "a huge eq",
        {"arguments": {"env": "x" * 5000}},
        {"standing": {"ttl_seconds": 60, "arguments": {"env": {"eq": "x" * 5000}}}},
    ),
    (
        "too many constraints",
        {"arguments": {f"a{i}": i for i in range(30)}},
        {"standing": {"ttl_seconds": 60, "arguments": {f"a{i}": {"eq": i} for i in range(30)}}},
    ),
]


@pytest.mark.parametrize(("case", "overrides", "body"), HOSTILE, ids=[h[0] for h in HOSTILE])
async def test_hostile_grants_are_refused_and_nothing_is_stored(
    client: httpx.AsyncClient,
    ctx: AppContext,
    org: Org,
    case: str,
    overrides: dict[str, Any],
    body: dict[str, Any],
) -> None:
    created = await request(client, org.members[0], **overrides)
    answer = await decide(client, org.admin, created["id"], **body)
    details = assert_error(answer, 400, "VALIDATION_ERROR")
    assert any("standing" in f["field"] for f in details["fields"]), details
    read = await client.get(f"/api/v1/approvals/{created['id']}", headers=org.admin.headers)
    assert read.json()["status"] == "pending", "the decision was not made"
    assert read.json()["current_approvals"] == 0
    assert await standing_list(client, org.admin) == []
    assert await org_events(ctx, org.id, "standing_approval.granted") == []


async def test_the_org_settings_hold_the_caps(client: httpx.AsyncClient, org: Org) -> None:
    read = await client.get("/api/v1/org/settings", headers=org.member.headers)
    assert read.json()["standing_approvals"] == {
        "max_ttl_seconds": None,
        "max_uses": None,
        "forbidden_action_types": [],
    }
    caps = {"max_ttl_seconds": 3600, "max_uses": 10, "forbidden_action_types": ["db.drop"]}
    changed = await client.patch(
        "/api/v1/org/settings", json={"standing_approvals": caps}, headers=org.admin.headers
    )
    assert changed.status_code == 200, changed.text
    assert changed.json()["standing_approvals"] == caps
    assert changed.json()["self_approval"] == "allow"
    read = await client.get("/api/v1/org/settings", headers=org.member.headers)
    assert read.json()["standing_approvals"] == caps
    refused = await client.patch(
        "/api/v1/org/settings", json={"standing_approvals": caps}, headers=org.member.headers
    )
    assert_error(refused, 403, "FORBIDDEN")


HOSTILE_CAPS: list[Any] = [
    "none",
    {"max_ttl_seconds": 0},
    {"max_ttl_seconds": -1},
    {"max_ttl_seconds": 10**12},
    {"max_uses": 1.5},
    {"max_uses": True},
    {"forbidden_action_types": "db.drop"},
    {"forbidden_action_types": [1, 2]},
    {"forbidden_action_types": ["x" * 101]},
    {"forbidden_action_types": [f"t{i}" for i in range(101)]},
    {"forever": True},
]


@pytest.mark.parametrize("caps", HOSTILE_CAPS)
async def test_hostile_caps_are_refused_and_nothing_changes(
    client: httpx.AsyncClient, org: Org, caps: Any
) -> None:
    answer = await client.patch(
        "/api/v1/org/settings",
        json={"standing_approvals": caps, "self_approval": "forbid"},
        headers=org.admin.headers,
    )
    details = assert_error(answer, 400, "VALIDATION_ERROR")
    assert details["fields"][0]["field"].startswith("standing_approvals")
    read = (await client.get("/api/v1/org/settings", headers=org.admin.headers)).json()
    assert read["standing_approvals"]["max_uses"] is None
    assert read["self_approval"] == "allow"


CAPPED: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("ttl past the cap", {"max_ttl_seconds": 3600}, {"ttl_seconds": 7200}),
    ("no ttl under a ttl cap", {"max_ttl_seconds": 3600}, {"max_uses": 3}),
    ("uses past the cap", {"max_uses": 3}, {"max_uses": 4}),
    ("no uses under a uses cap", {"max_uses": 3}, {"ttl_seconds": 60}),
    ("a forbidden action type", {"forbidden_action_types": ["deploy.staging"]}, {"max_uses": 1}),
]


@pytest.mark.parametrize(("case", "caps", "standing"), CAPPED, ids=[c[0] for c in CAPPED])
async def test_grants_past_the_caps_are_refused(
    client: httpx.AsyncClient,
    org: Org,
    case: str,
    caps: dict[str, Any],
    standing: dict[str, Any],
) -> None:
    capped = await client.patch(
        "/api/v1/org/settings", json={"standing_approvals": caps}, headers=org.admin.headers
    )
    assert capped.status_code == 200, capped.text
    created = await request(client, org.members[0])
    assert_error(
        await decide(client, org.admin, created["id"], standing=standing), 400, "VALIDATION_ERROR"
    )
    assert await standing_list(client, org.admin) == []
    # Within the caps it is granted.
    within = {"ttl_seconds": 600, "max_uses": 2}
    answer = await decide(client, org.admin, created["id"], standing=within)
    if "forbidden_action_types" in caps:
        assert_error(answer, 400, "VALIDATION_ERROR")
    else:
        assert answer.status_code == 200, answer.text
        assert len(await standing_list(client, org.admin)) == 1
