"""The request's shape is declared once (approvals/json_fields.py): every path that renders a
request (the Python presenter, the database's rendering for lists, the single read, a
decision's answer, the callback body) agrees with it and with each other, field for field.
"""

from __future__ import annotations

import json
from typing import Any

import httpx

from signoff.approvals.json_fields import REQUEST_FIELDS
from signoff.approvals.schemas import ApprovalRequestOut
from tests.conftest import Org, create_approval
from tests.helpers import CallbackReceiver

DECLARED = [field.key for field in REQUEST_FIELDS]
# Keys of a request that its callback repeats (interface.md 6.3), by their callback name.
CALLBACK_KEYS = {
    "request_id": "id",
    "status": "status",
    "title": "title",
    "priority": "priority",
    "action_type": "action_type",
    "decided_at": "decided_at",
    "metadata": "metadata",
    "decided_by_name": "decided_by_name",
    "decision_comment": "decision_comment",
}


def test_the_answer_model_documents_exactly_the_declared_keys() -> None:
    assert list(ApprovalRequestOut.model_fields) == DECLARED


async def test_every_path_renders_a_request_alike(client: httpx.AsyncClient, org: Org) -> None:
    metadata: dict[str, Any] = {"ticket": "OPS-7", "list": [1, 2.5, None, True], "é": {"k": "v"}}
    async with CallbackReceiver() as receiver:
        created = await create_approval(
            client,
            org.member,
            metadata=metadata,
            action_type="deploy.prod",
            source="ci",
            callback_url=receiver.url,
            expires_at="2099-01-01T00:00:00Z",
        )
        url = f"/api/v1/approvals/{created['id']}"
        decided = (
            await client.patch(
                url, headers=org.admin.headers, json={"decision": "approve", "comment": "go"}
            )
        ).json()
    detail = (await client.get(url, headers=org.member.headers)).json()
    [listed] = (await client.get("/api/v1/approvals", headers=org.member.headers)).json()["data"]
    callback = json.loads(receiver.bodies[0])

    # List items add what they say of the receipt, never the receipt itself.
    assert list(listed) == [*DECLARED, "receipt_issued", "receipt_uses"]
    assert listed["receipt_issued"] is detail["receipt_issued"] is True
    assert [key for key in detail if key in DECLARED] == DECLARED
    assert [key for key in decided if key in DECLARED] == DECLARED
    for key in DECLARED:
        assert detail[key] == listed[key] == decided[key], key
    assert created["status"] == "pending" and detail["status"] == "approved"
    # Existing clients read it on every request: false until approval policies exist.
    assert created["auto_approved"] is detail["auto_approved"] is listed["auto_approved"] is False
    assert created["number"] == detail["number"] == listed["number"] == decided["number"] == 1
    for callback_key, request_key in CALLBACK_KEYS.items():
        assert callback[callback_key] == detail[request_key], callback_key
    assert callback["decided_by"]["id"] == detail["decided_by"]
