"""Approve with edits over the API, on SQLite and PostgreSQL: the edited arguments checked
against the request's schema, the request and its receipt bound to them, the audit's
``arguments.edited`` event, earlier votes dismissed (count-based) or steps reopened
(chains), the callback's patch, and every hostile edit a 400 envelope."""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest
from bench.receiver import Receiver
from joserfc import jws

from signoff.receipts.arguments import arguments_hash
from tests.conftest import Member, Org, assert_error, create_approval
from tests.receipts.test_receipts import ARGS, SCHEMA, read
from tests.steps.test_steps import set_chain, vote

EDITED = {"service": "billing", "replicas": 5, "regions": ["eu"]}


async def decide(
    client: httpx.AsyncClient, who: Member, request_id: str, **body: Any
) -> httpx.Response:
    return await client.patch(
        f"/api/v1/approvals/{request_id}",
        json={"decision": "approve", **body},
        headers=who.headers,
    )


async def events(client: httpx.AsyncClient, org: Org, request_id: str) -> list[dict[str, Any]]:
    response = await client.get(f"/api/v1/approvals/{request_id}/events", headers=org.admin.headers)
    assert response.status_code == 200, response.text
    found: list[dict[str, Any]] = response.json()["data"]
    return found


def claims_of(token: str) -> dict[str, Any]:
    claims: dict[str, Any] = orjson.loads(jws.extract_compact(token.encode()).payload)
    return claims


async def test_an_edit_approves_and_the_receipt_binds_the_edited_arguments(
    client: httpx.AsyncClient, org: Org
) -> None:
    created = await create_approval(client, org.member, arguments=ARGS, arguments_schema=SCHEMA)
    assert created["original_arguments_hash"] is None
    response = await decide(client, org.admin, created["id"], arguments=EDITED)
    assert response.status_code == 200, response.text
    body = await read(client, org.member, created["id"])
    assert body["status"] == "approved"
    assert body["arguments"] == EDITED and body["arguments_edited"] is True
    assert body["arguments_hash"] == arguments_hash(EDITED)
    assert body["original_arguments_hash"] == arguments_hash(ARGS)
    assert claims_of(body["receipt"])["arguments_hash"] == arguments_hash(EDITED)
    [edited] = [
        e for e in await events(client, org, created["id"]) if e["type"] == "arguments.edited"
    ]
    assert edited["actor_id"] == org.admin.user_id
    assert edited["data"]["previous_arguments_hash"] == arguments_hash(ARGS)
    assert edited["data"]["arguments_hash"] == arguments_hash(EDITED)
    assert edited["data"]["counts_as_approval"] is True
    assert sorted(edited["data"]["patch"], key=lambda op: op["path"]) == [
        {"op": "remove", "path": "/regions/1"},
        {"op": "replace", "path": "/replicas", "value": 5},
    ]


async def test_the_same_arguments_are_no_edit(client: httpx.AsyncClient, org: Org) -> None:
    created = await create_approval(client, org.member, arguments=ARGS, arguments_schema=SCHEMA)
    assert (await decide(client, org.admin, created["id"], arguments=dict(ARGS))).status_code == 200
    body = await read(client, org.member, created["id"])
    assert body["status"] == "approved" and body["arguments_edited"] is False


async def test_an_edit_that_breaks_the_schema_names_each_pointer(
    client: httpx.AsyncClient, org: Org
) -> None:
    created = await create_approval(client, org.member, arguments=ARGS, arguments_schema=SCHEMA)
    broken = {"service": 7, "replicas": 0, "regions": ["eu", 3]}
    details = assert_error(
        await decide(client, org.admin, created["id"], arguments=broken), 400, "VALIDATION_ERROR"
    )
    pointers = {f["pointer"] for f in details["fields"]}
    assert pointers == {"/service", "/replicas", "/regions/1"}
    body = await read(client, org.member, created["id"])
    assert body["status"] == "pending" and body["arguments"] == ARGS


async def test_edits_without_a_schema_are_not_allowed(client: httpx.AsyncClient, org: Org) -> None:
    created = await create_approval(client, org.member, arguments=ARGS)
    assert_error(
        await decide(client, org.admin, created["id"], arguments=EDITED), 400, "EDITS_NOT_ALLOWED"
    )
    plain = await create_approval(client, org.member)
    assert_error(
        await decide(client, org.admin, plain["id"], arguments=EDITED), 400, "EDITS_NOT_ALLOWED"
    )
    assert (await read(client, org.member, plain["id"]))["status"] == "pending"


@pytest.mark.parametrize(
    "body",
    [
        {"decision": "reject", "arguments": EDITED},
        {"decision": "approve", "arguments": {"blob": "x" * 70_000}},
        {"decision": "approve", "arguments": {"n": 2**60}},
        {"decision": "approve", "arguments": [1, 2]},
        {"decision": "approve", "arguments": "text"},
    ],
    ids=["with-reject", "too-big", "past-2^53", "array", "string"],
)
async def test_hostile_edits_answer_400(
    client: httpx.AsyncClient, org: Org, body: dict[str, Any]
) -> None:
    created = await create_approval(client, org.member, arguments=ARGS, arguments_schema=SCHEMA)
    response = await client.patch(
        f"/api/v1/approvals/{created['id']}", json=body, headers=org.admin.headers
    )
    details = assert_error(response, 400, "VALIDATION_ERROR")
    assert any(f["field"].startswith("arguments") for f in details["fields"]), details
    assert (await read(client, org.member, created["id"]))["status"] == "pending"


async def test_deep_edits_answer_400(client: httpx.AsyncClient, org: Org) -> None:
    created = await create_approval(client, org.member, arguments=ARGS, arguments_schema={})
    deep: dict[str, Any] = {}
    for _ in range(40):
        deep = {"a": deep}
    assert_error(
        await decide(client, org.admin, created["id"], arguments=deep), 400, "VALIDATION_ERROR"
    )


async def test_a_count_based_edit_dismisses_earlier_approvals(
    client: httpx.AsyncClient, org: Org
) -> None:
    created = await create_approval(
        client, org.member, arguments=ARGS, arguments_schema=SCHEMA, required_approvals=3
    )
    first, editor, last = org.members[1], org.members[2], org.admin
    assert (await decide(client, first, created["id"])).status_code == 200
    edited = await decide(client, editor, created["id"], arguments=EDITED)
    assert edited.status_code == 200, edited.text
    body = edited.json()
    assert body["status"] == "pending" and body["current_approvals"] == 1
    [event] = [
        e for e in await events(client, org, created["id"]) if e["type"] == "arguments.edited"
    ]
    assert event["data"]["dismissed_approvals"] == [first.user_id]
    # The dismissed approver is asked again, and may vote again: on the new arguments.
    assert (await decide(client, first, created["id"])).status_code == 200
    assert (await decide(client, last, created["id"])).status_code == 200
    final = await read(client, org.member, created["id"])
    assert final["status"] == "approved" and final["arguments"] == EDITED
    assert sorted(claims_of(final["receipt"])["decided_by"]) == sorted(
        [first.user_id, editor.user_id, last.user_id]
    )
    assert claims_of(final["receipt"])["arguments_hash"] == arguments_hash(EDITED)


async def test_a_chain_edit_reopens_approved_steps(client: httpx.AsyncClient, org: Org) -> None:
    created = await create_approval(
        client, org.member, arguments=ARGS, arguments_schema=SCHEMA, is_sequential=True
    )
    first, second = org.members[1], org.members[2]
    steps = await set_chain(client, org.member, created["id"], [first, second])
    assert (await vote(client, first, created["id"], steps[0]["id"])).status_code == 200
    edited = await vote(client, second, created["id"], steps[1]["id"], arguments=EDITED)
    assert edited.status_code == 200, edited.text
    listed = await client.get(f"/api/v1/approvals/{created['id']}/steps", headers=org.admin.headers)
    statuses = [s["status"] for s in listed.json()["data"]]
    assert statuses == ["pending", "approved"]
    body = await read(client, org.member, created["id"])
    assert body["status"] == "pending" and body["current_approvals"] == 1
    [event] = [
        e for e in await events(client, org, created["id"]) if e["type"] == "arguments.edited"
    ]
    assert event["data"]["reopened_steps"] == [steps[0]["id"]]
    # The reopened step is voted again, on the edited arguments.
    assert (await vote(client, first, created["id"], steps[0]["id"])).status_code == 200
    final = await read(client, org.member, created["id"])
    assert final["status"] == "approved"
    assert claims_of(final["receipt"])["arguments_hash"] == arguments_hash(EDITED)


async def test_the_callback_carries_the_arguments_and_the_patch(
    client: httpx.AsyncClient, org: Org
) -> None:
    async with Receiver() as receiver:
        created = await create_approval(
            client, org.member, arguments=ARGS, arguments_schema=SCHEMA, callback_url=receiver.url
        )
        plain = await create_approval(client, org.member, callback_url=receiver.url)
        assert (await decide(client, org.admin, created["id"], arguments=EDITED)).status_code == 200
        assert (await decide(client, org.admin, plain["id"])).status_code == 200
        sent = [orjson.loads(r.body) for r in await receiver.wait_for(2)]
    by_id = {body["request_id"]: body for body in sent}
    edited = by_id[created["id"]]
    assert edited["arguments"] == EDITED and edited["arguments_edited"] is True
    assert edited["arguments_hash"] == arguments_hash(EDITED)
    assert {"op": "replace", "path": "/replicas", "value": 5} in edited["arguments_patch"]
    untouched = by_id[plain["id"]]
    assert untouched["arguments"] == {} and untouched["arguments_edited"] is False
    assert "arguments_patch" not in untouched
