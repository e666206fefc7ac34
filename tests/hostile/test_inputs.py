"""Hostile inputs answer 400 naming the field, never 500, on both databases; and nothing
accepted can later fail to render (issue: hostile input, defects 1 and 3 to 8)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from signoff.context import AppContext
from tests.conftest import Org, approval_body, assert_error, create_approval
from tests.helpers import CallbackReceiver


def nested(depth: int) -> dict[str, Any]:
    """An object ``depth`` objects deep: {"k": {"k": ... {"k": 1}}}."""
    value: Any = 1
    for _ in range(depth - 1):
        value = {"k": value}
    return {"k": value}


def assert_field_error(response: httpx.Response, field: str) -> str:
    details = assert_error(response, 400, "VALIDATION_ERROR")
    fields = {f["field"]: f["message"] for f in details["fields"]}
    assert any(name == field or name.startswith(f"{field}.") for name in fields), fields
    return next(m for n, m in fields.items() if n == field or n.startswith(f"{field}."))


async def post_raw(client: httpx.AsyncClient, org: Org, raw: str) -> httpx.Response:
    return await client.post(
        "/api/v1/approvals",
        content=raw.encode(),
        headers={**org.member.headers, "Content-Type": "application/json"},
    )


# ---- defect 1: metadata depth ----


@pytest.mark.parametrize("depth", [33, 254, 255, 600, 1000])
async def test_metadata_nested_too_deep_is_a_400_naming_the_field(
    client: httpx.AsyncClient, org: Org, depth: int
) -> None:
    body = json.dumps(approval_body(idempotency_key=f"deep-{depth}"))
    # Written by hand: the standard library's encoder stops near 1,000 levels itself.
    raw = body.rstrip("}") + ', "metadata": ' + '{"k": ' * depth + "1" + "}" * depth + "}"
    message = assert_field_error(await post_raw(client, org, raw), "metadata")
    assert "32 levels" in message
    # Nothing was stored under the key: a retry is refused the same way, not replayed.
    assert_field_error(await post_raw(client, org, raw), "metadata")


async def test_nesting_beyond_the_parser_is_a_400(client: httpx.AsyncClient, org: Org) -> None:
    raw = json.dumps(approval_body()).rstrip("}") + ', "metadata": ' + "[" * 5000 + "]" * 5000 + "}"
    assert_error(await post_raw(client, org, raw), 400, "VALIDATION_ERROR")


async def test_metadata_at_the_limit_renders_everywhere(
    client: httpx.AsyncClient, org: Org, ctx: AppContext
) -> None:
    metadata = nested(32)
    async with CallbackReceiver() as receiver:
        created = await create_approval(
            client,
            org.member,
            metadata=metadata,
            idempotency_key="at-the-limit",
            callback_url=receiver.url,
        )
        url = f"/api/v1/approvals/{created['id']}"
        read = await client.get(url, headers=org.member.headers)
        assert read.status_code == 200 and read.json()["metadata"] == metadata
        replay = await client.post(
            "/api/v1/approvals",
            json=approval_body(metadata=metadata, idempotency_key="at-the-limit"),
            headers=org.member.headers,
        )
        assert replay.status_code == 200 and replay.json()["id"] == created["id"]
        listed = await client.get("/api/v1/approvals", headers=org.member.headers)
        assert listed.json()["data"][0]["metadata"] == metadata
        decided = await client.patch(url, headers=org.admin.headers, json={"decision": "reject"})
        assert decided.status_code == 200 and decided.json()["callback_delivered"] is True
        assert json.loads(receiver.bodies[0])["metadata"] == metadata
        gone = await client.delete(url, headers=org.member.headers)
        assert_error(gone, 409, "REQUEST_NOT_PENDING")


# ---- defect 6: integers beyond 64 bits ----


@pytest.mark.parametrize("number", [str(2**63), str(2**64 + 1), "1" + "0" * 30, str(-(2**63) - 1)])
async def test_integers_beyond_64_bits_are_refused_not_changed(
    client: httpx.AsyncClient, org: Org, number: str
) -> None:
    raw = json.dumps(approval_body()).rstrip("}") + f', "metadata": {{"n": {number}}}}}'
    response = await post_raw(client, org, raw)
    details = assert_error(response, 400, "VALIDATION_ERROR")
    assert "64 bits" in details["fields"][0]["message"]


async def test_numbers_within_range_round_trip_exactly(client: httpx.AsyncClient, org: Org) -> None:
    metadata = {"max": 2**63 - 1, "min": -(2**63), "float": 1.5e300, "small": 5e-324}
    created = await create_approval(client, org.member, metadata=metadata)
    read = await client.get(f"/api/v1/approvals/{created['id']}", headers=org.member.headers)
    assert read.json()["metadata"] == metadata
    listed = (await client.get("/api/v1/approvals", headers=org.member.headers)).json()
    item = listed["data"][0]["metadata"]
    assert (item["max"], item["min"]) == (2**63 - 1, -(2**63))
    # PostgreSQL may print 1.5e300 with all its digits: the same number, in JSON's terms.
    assert float(item["float"]) == 1.5e300


# ---- defect 4: NUL characters ----

NUL = "a\u0000b"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("title", NUL),
        ("description", NUL),
        ("source", NUL),
        ("idempotency_key", NUL),
        ("action_type", NUL),
        ("callback_url", "http://127.0.0.1/\u0000"),
        ("metadata", {"key": NUL}),
        ("metadata", {NUL: "value"}),
        ("metadata", {"list": ["fine", NUL]}),
    ],
)
async def test_nul_in_any_create_string_is_a_400(
    client: httpx.AsyncClient, org: Org, field: str, value: Any
) -> None:
    response = await client.post(
        "/api/v1/approvals", json=approval_body(**{field: value}), headers=org.member.headers
    )
    assert_field_error(response, field)


async def test_nul_in_comments_decisions_steps_and_filters_is_a_400(
    client: httpx.AsyncClient, org: Org
) -> None:
    created = await create_approval(client, org.member)
    url = f"/api/v1/approvals/{created['id']}"
    headers = org.admin.headers
    assert_field_error(
        await client.post(f"{url}/comments", json={"body": NUL}, headers=headers), "body"
    )
    for body in ({"decision": "approve", "comment": NUL}, {"decision": "approve", "source": NUL}):
        field = next(k for k in body if k != "decision")
        assert_field_error(await client.patch(url, json=body, headers=headers), field)
    steps = {"steps": [{"approver_id": NUL, "step_order": 1}]}
    assert_field_error(await client.post(f"{url}/steps", json=steps, headers=headers), "steps")
    for param in ("search", "source", "action_type", "status", "priority", "created_after"):
        listed = await client.get("/api/v1/approvals", params={param: NUL}, headers=headers)
        assert_field_error(listed, param)
    assert_field_error(
        await client.post("/api/v1/test-webhook", json={"url": NUL}, headers=headers), "url"
    )
    # Still pending and untouched.
    assert (await client.get(url, headers=headers)).json()["comments_count"] == 0


# ---- defect 3: callback headers every delivery would fail on ----


@pytest.mark.parametrize(
    "headers",
    [
        {"X-Team": "caf\u00e9"},
        {"X-Team": "a\u0001b"},
        {"X-Team": "a\u007fb"},
        {"X-Team": " leading"},
        {"X-Team": "trailing "},
        {"X-Team": "tab\t"},
        {"X-Team": "line\r\nX-Injected: 1"},
        {"X Team": "space in name"},
        {"X-T\u00e9am": "non-ASCII name"},
        {"": "empty name"},
        {"X-Team:": "colon"},
    ],
)
async def test_callback_headers_that_could_not_be_sent_are_a_400(
    client: httpx.AsyncClient, org: Org, headers: dict[str, str]
) -> None:
    response = await client.post(
        "/api/v1/approvals",
        json=approval_body(callback_url="http://127.0.0.1:9/hook", callback_headers=headers),
        headers=org.member.headers,
    )
    assert_field_error(response, "callback_headers")


async def test_valid_callback_headers_reach_the_receiver(
    client: httpx.AsyncClient, org: Org
) -> None:
    headers = {"X-Team": "billing ops", "Authorization": "Bearer a.b-c_d~e+f/g=", "X-Empty": ""}
    async with CallbackReceiver() as receiver:
        created = await create_approval(
            client, org.member, callback_url=receiver.url, callback_headers=headers
        )
        decided = await client.patch(
            f"/api/v1/approvals/{created['id']}",
            headers=org.admin.headers,
            json={"decision": "approve"},
        )
        assert decided.json()["callback_delivered"] is True
    assert receiver.headers[0]["x-team"] == "billing ops"
    assert receiver.headers[0]["authorization"] == headers["Authorization"]


# ---- defect 5: bounded integers and timestamps ----


@pytest.mark.parametrize(
    "expires_at",
    ["9999-12-31T23:59:59-23:59", "0001-01-01T00:00:00+14:00", "10000-01-01T00:00:00Z"],
)
async def test_extreme_expiry_offsets_are_a_400(
    client: httpx.AsyncClient, org: Org, expires_at: str
) -> None:
    response = await client.post(
        "/api/v1/approvals", json=approval_body(expires_at=expires_at), headers=org.member.headers
    )
    assert_field_error(response, "expires_at")


async def test_huge_integers_in_every_integer_field_are_a_400(
    client: httpx.AsyncClient, org: Org
) -> None:
    huge = 2**63
    created = await create_approval(client, org.admin)
    url = f"/api/v1/approvals/{created['id']}"
    steps = {"steps": [{"approver_id": org.member.user_id, "step_order": huge}]}
    assert_field_error(
        await client.post(f"{url}/steps", json=steps, headers=org.admin.headers), "steps"
    )
    for params in ({"page": str(huge - 1)}, {"page": "10000001"}, {"page_size": str(huge)}):
        listed = await client.get("/api/v1/approvals", params=params, headers=org.admin.headers)
        assert_field_error(listed, next(iter(params)))
    assert_field_error(
        await client.get(
            "/api/v1/webhooks", params={"limit": str(huge)}, headers=org.admin.headers
        ),
        "limit",
    )
    assert_field_error(
        await client.post(
            "/api/v1/approvals",
            json=approval_body(required_approvals=huge),
            headers=org.admin.headers,
        ),
        "required_approvals",
    )
    wait = await client.get(url, params={"wait": "1e308"}, headers=org.admin.headers)
    assert_field_error(wait, "wait")


async def test_the_last_page_within_bounds_is_an_empty_page(
    client: httpx.AsyncClient, org: Org
) -> None:
    listed = await client.get(
        "/api/v1/approvals", params={"page": "10000000"}, headers=org.member.headers
    )
    assert listed.status_code == 200
    assert listed.json()["data"] == []


# ---- defect 7: strict booleans ----


@pytest.mark.parametrize("value", ["yes", "true", 1, "1", "on"])
async def test_booleans_are_json_booleans_only(
    client: httpx.AsyncClient, org: Org, value: Any
) -> None:
    stop = await client.put(
        "/api/v1/emergency-stop", json={"active": value}, headers=org.admin.headers
    )
    assert_field_error(stop, "active")
    read = await client.get("/api/v1/emergency-stop", headers=org.admin.headers)
    assert read.json()["active"] is False
    cancel = await client.put(
        "/api/v1/emergency-stop",
        json={"active": False, "cancel_pending": value},
        headers=org.admin.headers,
    )
    assert_field_error(cancel, "cancel_pending")
    sequential = await client.post(
        "/api/v1/approvals", json=approval_body(is_sequential=value), headers=org.member.headers
    )
    assert_field_error(sequential, "is_sequential")


# ---- defect 8: test-webhook answers ----


async def test_only_admins_see_what_a_test_receiver_answered(
    client: httpx.AsyncClient, org: Org
) -> None:
    async with CallbackReceiver(status=500) as receiver:
        member = await client.post(
            "/api/v1/test-webhook", json={"url": receiver.url}, headers=org.member.headers
        )
        admin = await client.post(
            "/api/v1/test-webhook", json={"url": receiver.url}, headers=org.admin.headers
        )
    assert member.status_code == admin.status_code == 200
    assert member.json()["status_code"] == admin.json()["status_code"] == 500
    assert member.json()["response_body"] is None
    assert admin.json()["response_body"] is not None


# ---- huge and wide input on every write route ----

WRITE_ROUTES = [
    ("POST", "/api/v1/approvals", "title"),
    ("PATCH", "/api/v1/approvals/{id}", "comment"),
    ("POST", "/api/v1/approvals/{id}/comments", "body"),
    ("POST", "/api/v1/test-webhook", "url"),
]


@pytest.mark.parametrize(("method", "path", "field"), WRITE_ROUTES)
async def test_huge_strings_are_refused_on_every_write_route(
    client: httpx.AsyncClient, org: Org, method: str, path: str, field: str
) -> None:
    created = await create_approval(client, org.member)
    url = path.format(id=created["id"])
    base: dict[str, Any] = approval_body() if field == "title" else {"decision": "approve"}
    too_long = {**base, field: "x" * 20_000}
    assert_field_error(
        await client.request(method, url, json=too_long, headers=org.admin.headers), field
    )
    over_the_body_limit = {**base, field: "x" * (2 * 1024 * 1024)}
    huge = await client.request(method, url, json=over_the_body_limit, headers=org.admin.headers)
    assert_error(huge, 413, "PAYLOAD_TOO_LARGE")
    still = await client.get(f"/api/v1/approvals/{created['id']}", headers=org.admin.headers)
    assert still.json()["status"] == "pending"


async def test_wide_metadata_is_held_to_its_size_limit(client: httpx.AsyncClient, org: Org) -> None:
    wide = {f"key-{index}": index for index in range(20_000)}  # some 300 KB as JSON
    response = await client.post(
        "/api/v1/approvals", json=approval_body(metadata=wide), headers=org.member.headers
    )
    assert "bytes" in assert_field_error(response, "metadata")
    fits = {f"key-{index}": index for index in range(1_000)}
    created = await create_approval(client, org.member, metadata=fits)
    assert created["metadata"] == fits


async def test_wide_lists_of_steps_and_headers_are_refused(
    client: httpx.AsyncClient, org: Org
) -> None:
    created = await create_approval(client, org.admin)
    steps = [{"approver_id": org.member.user_id, "step_order": i} for i in range(1, 5_001)]
    assert_field_error(
        await client.post(
            f"/api/v1/approvals/{created['id']}/steps",
            json={"steps": steps},
            headers=org.admin.headers,
        ),
        "steps",
    )
    headers = {f"X-H{i}": "v" for i in range(500)}
    response = await client.post(
        "/api/v1/approvals",
        json=approval_body(callback_url="http://127.0.0.1:9/hook", callback_headers=headers),
        headers=org.member.headers,
    )
    assert_field_error(response, "callback_headers")
