"""A policy ``require`` rule naming groups (issue 36): checked when saved, and applied
at create as a chain of group steps, in parallel or in order; on both databases."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from signoff.context import AppContext
from tests.conftest import Org, assert_error, create_approval, create_org
from tests.steps.test_group_steps import make_group
from tests.steps.test_steps import vote

pytestmark = pytest.mark.anyio


def document(order: str) -> dict[str, Any]:
    return {
        "rules": [
            {
                "name": "payments need finance and security",
                "condition": 'request.action_type == "payment"',
                "effect": "require",
                "groups": [{"group": "finance", "count": 2}, {"group": "Security", "count": 1}],
                "order": order,
            }
        ]
    }


@pytest.mark.parametrize("order", ["parallel", "sequential"])
async def test_require_with_groups_creates_the_group_steps(
    client: httpx.AsyncClient, ctx: AppContext, order: str
) -> None:
    org = await create_org(ctx, "Initech", members=5)
    finance, security = org.members[:3], org.members[3:4]
    finance_id = await make_group(client, org, "Finance", finance)
    security_id = await make_group(client, org, "Security", security)
    saved = await client.put("/api/v1/policies", json=document(order), headers=org.admin.headers)
    assert saved.status_code == 200, saved.text
    assert saved.json()["rules"][0]["groups"][0] == {"group": "finance", "count": 2}

    request = await create_approval(client, org.members[4], action_type="payment")
    assert request["status"] == "pending"
    chain = await client.get(f"/api/v1/approvals/{request['id']}/steps", headers=org.admin.headers)
    fin_step, sec_step = chain.json()["data"]
    assert (fin_step["group_id"], fin_step["required_approvals"]) == (finance_id, 2)
    assert (sec_step["group_id"], sec_step["group_name"]) == (security_id, "Security")

    first_security = await vote(client, security[0], request["id"], sec_step["id"])
    if order == "sequential":
        assert_error(first_security, 409, "STEP_OUT_OF_ORDER")
    else:
        assert first_security.status_code == 200, first_security.text
    assert (await vote(client, finance[0], request["id"], fin_step["id"])).status_code == 200
    last = await vote(client, finance[1], request["id"], fin_step["id"])
    if order == "sequential":
        assert last.json()["request_status"] == "pending"
        last = await vote(client, security[0], request["id"], sec_step["id"])
    assert last.json()["request_status"] == "approved"

    other = await create_approval(client, org.members[4], action_type="deploy")
    unmatched = await client.get(
        f"/api/v1/approvals/{other['id']}/steps", headers=org.admin.headers
    )
    assert unmatched.json()["data"] == []


async def test_an_unknown_group_is_refused_naming_the_rule(
    client: httpx.AsyncClient, org: Org, other_org: Org
) -> None:
    await make_group(client, org, "Finance", org.members[:2])
    await make_group(client, other_org, "Security", other_org.members[:1])
    refused = await client.put(
        "/api/v1/policies", json=document("parallel"), headers=org.admin.headers
    )
    details = assert_error(refused, 400, "VALIDATION_ERROR")
    assert details["fields"] == [
        {
            "field": "rules.0.groups.1.group",
            "message": "rule 'payments need finance and security' names no group of this "
            "organization",
        }
    ]
    kept = await client.get("/api/v1/policies", headers=org.admin.headers)
    assert kept.json()["version"] == 0


@pytest.mark.parametrize(
    ("rule", "field"),
    [
        ({"groups": []}, "rules.0.groups"),
        ({"groups": [{"group": "Finance", "count": 0}]}, "rules.0.groups.0.count"),
        ({"groups": [{"count": 1}]}, "rules.0.groups.0.group"),
        ({"groups": [{"group": "Finance"}], "order": "random"}, "rules.0.order"),
        ({"groups": [{"group": "Finance"}], "required_approvals": 2}, "rules.0.required_approvals"),
    ],
)
async def test_malformed_group_rules_are_refused(
    client: httpx.AsyncClient, org: Org, rule: dict[str, Any], field: str
) -> None:
    body = {"rules": [{"name": "r", "condition": "true", "effect": "require", **rule}]}
    refused = await client.put("/api/v1/policies", json=body, headers=org.admin.headers)
    details = assert_error(refused, 400, "VALIDATION_ERROR")
    assert field in [f["field"] for f in details["fields"]], details


async def test_the_dry_run_counts_a_group_rule_as_people_deciding(
    client: httpx.AsyncClient, org: Org
) -> None:
    await make_group(client, org, "Finance", org.members[:2])
    await make_group(client, org, "Security", org.members[2:3])
    for action_type, decision in (
        ("payment", "approve"),
        ("payment", "reject"),
        ("deploy", "approve"),
    ):
        created = await create_approval(client, org.member, action_type=action_type)
        decided = await client.patch(
            f"/api/v1/approvals/{created['id']}",
            json={"decision": decision},
            headers=org.admin.headers,
        )
        assert decided.status_code == 200, decided.text
    answer = await client.post(
        "/api/v1/policies/dry-run",
        json={**document("parallel"), "days": 7},
        headers=org.admin.headers,
    )
    assert answer.status_code == 200, answer.text
    body = answer.json()
    # By hand: two payments match and go to people (their groups); the deploy matches nothing.
    assert body["rules"] == [
        {"name": "payments need finance and security", "effect": "require", "matched": 2}
    ]
    assert body["decisions"]["require"] == 2 and body["decisions"]["people"] == 1
    assert body["disagreement_count"] == 0
