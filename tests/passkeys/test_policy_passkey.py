"""A policy rule that asks for a passkey (``passkey: true`` on a require or escalate
rule), on both databases: the requests it matches answer 403 PASSKEY_REQUIRED to API
keys, are decided with a passkey on their page, and are mailed with their page's link
only (tests/notifications/test_passkey_links.py); requests it does not match are
decided as before."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from signoff.context import AppContext
from tests.conftest import Org, assert_error, create_approval
from tests.passkeys.test_passkey_decisions import (
    decide_signed,
    member_of,
    options_for,
    with_passkey,
)

pytestmark = pytest.mark.anyio

BIG = {
    "name": "big payments",
    "condition": "request.action_type == 'payment'",
    "effect": "require",
    "required_approvals": 1,
    "passkey": True,
}


async def _policy(client: httpx.AsyncClient, org: Org, *rules: dict[str, Any]) -> httpx.Response:
    return await client.put(
        "/api/v1/policies", json={"rules": list(rules)}, headers=org.admin.headers
    )


async def test_a_matched_request_needs_a_passkey_and_others_do_not(
    ctx: AppContext, client: httpx.AsyncClient, org: Org
) -> None:
    saved = await _policy(client, org, BIG)
    assert saved.status_code == 200, saved.text
    assert saved.json()["rules"][0]["passkey"] is True
    matched = await create_approval(client, org.member, action_type="payment")
    other = await create_approval(client, org.member, action_type="deploy")
    refused = await client.patch(
        f"/api/v1/approvals/{matched['id']}",
        json={"decision": "approve"},
        headers=org.admin.headers,
    )
    assert_error(refused, 403, "PASSKEY_REQUIRED")
    decided = await client.patch(
        f"/api/v1/approvals/{other['id']}", json={"decision": "approve"}, headers=org.admin.headers
    )
    assert decided.status_code == 200, decided.text
    # On its page, with the approver's passkey, it is decided.
    device = await with_passkey(ctx, org, org.admin)
    admin = await member_of(ctx, org.admin)
    credential = device.assert_(await options_for(ctx, admin, matched["id"], "approve"))
    result = await decide_signed(ctx, admin, matched["id"], "approve", credential)
    assert result.request.status == "approved"


@pytest.mark.parametrize(
    ("rule", "field"),
    [
        ({**BIG, "effect": "auto_approve"}, "rules.0.passkey"),
        ({**BIG, "passkey": "yes"}, "rules.0.passkey"),
    ],
    ids=["not-on-auto-approve", "not-a-boolean"],
)
async def test_the_passkey_option_is_checked(
    client: httpx.AsyncClient, org: Org, rule: dict[str, Any], field: str
) -> None:
    answer = await _policy(client, org, rule)
    assert_error(answer, 400, "VALIDATION_ERROR")
    fields = [item["field"] for item in answer.json()["error"]["details"]["fields"]]
    assert field in fields
