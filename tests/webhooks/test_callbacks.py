"""Decision callbacks against real receivers on loopback, on SQLite and PostgreSQL.

Signing is checked with the ``standardwebhooks`` package itself and by recomputing
``X-Service-Signature`` as a receiver would; the retry schedule is stepped with a clock the
test moves (``WebhookDispatcher.clock``), so it is checked exactly and without waiting.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import orjson
import pytest
from bench.receiver import Receiver, Reply, free_port
from sqlalchemy import select
from standardwebhooks import Webhook, WebhookVerificationError

from signoff.common.ids import parse_id
from signoff.common.time import parse_timestamp, utcnow
from signoff.context import AppContext
from signoff.models import WebhookDelivery
from signoff.models.approvals import EMPTY_ARGUMENTS_HASH
from signoff.orgs import service as orgs_service
from signoff.wiring import Wiring
from tests.conftest import (
    ManualClock,
    Member,
    Org,
    assert_error,
    create_approval,
    eventually,
)

FAST = {
    "delivery_retry_delays_seconds": [0.2, 0.3, 0.4],
    "delivery_timeout_seconds": 2.0,
    "delivery_lease_seconds": 4.0,
    # No polling to fall back on: every wake-up of the worker here must be the prompt one
    # (in-process event on SQLite, LISTEN/NOTIFY on PostgreSQL) or a timer it set itself.
    "delivery_poll_interval_seconds": 60.0,
}


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    return dict(FAST)


def service_signature(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


async def decide(
    client: httpx.AsyncClient, who: Member, request_id: str, decision: str = "approve", **extra: Any
) -> dict[str, Any]:
    response = await client.patch(
        f"/api/v1/approvals/{request_id}", json={"decision": decision, **extra}, headers=who.headers
    )
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def delivery_log(
    client: httpx.AsyncClient, who: Member, request_id: str | None = None, limit: int = 100
) -> list[dict[str, Any]]:
    params: dict[str, Any] = {"limit": limit}
    if request_id:
        params["request_id"] = request_id
    response = await client.get("/api/v1/webhooks", params=params, headers=who.headers)
    assert response.status_code == 200, response.text
    data: list[dict[str, Any]] = response.json()["data"]
    return data


async def stored_deliveries(ctx: AppContext, request_id: str | None = None) -> list[Any]:
    """The delivery rows (of one request, or of every request), oldest first."""
    query = select(WebhookDelivery).order_by(WebhookDelivery.created_at)
    if request_id is not None:
        query = query.where(WebhookDelivery.request_id == parse_id(request_id))
    async with ctx.reading() as uow:
        return list((await uow.session.scalars(query)).all())


async def all_finished(ctx: AppContext) -> bool:
    """No delivery is left to attempt: every one succeeded or failed for good."""
    return all(d.status != "pending" for d in await stored_deliveries(ctx))


async def retry_when_due(
    client: httpx.AsyncClient,
    ctx: AppContext,
    wiring: Wiring,
    clock: ManualClock,
    org: Org,
    request_id: str,
) -> tuple[Any, list[dict[str, Any]]]:
    """Move the clock to the pending delivery's due time and wake the worker; answers the
    delivery as it was before and the delivery log once the attempt is recorded."""
    [delivery] = await stored_deliveries(ctx, request_id)
    assert delivery.status == "pending"
    made = len(await delivery_log(client, org.member, request_id))
    clock.now = delivery.due_at
    wiring.webhooks.wakeup.set()
    entries = await wait_for_log(client, org.member, request_id, lambda e: len(e) > made)
    return delivery, entries


async def wait_for_log(
    client: httpx.AsyncClient,
    who: Member,
    request_id: str,
    done: Any,
    timeout: float = 10.0,
) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while True:
        entries = await delivery_log(client, who, request_id)
        if done(entries):
            return entries
        if time.monotonic() > deadline:
            raise AssertionError(f"delivery log never got there: {entries}")
        await asyncio.sleep(0.05)


# ---- success: signatures, payload, headers ----


async def test_decision_is_delivered_signed_with_the_payload_and_headers(
    client: httpx.AsyncClient, org: Org
) -> None:
    async with Receiver() as receiver:
        created = await create_approval(
            client,
            org.member,
            action_type="deploy.production",
            metadata={"sha": "abc123", "nested": {"n": [1, 2]}},
            callback_url=receiver.url,
            callback_headers={"X-Token": "s3cret", "Authorization": "Bearer downstream"},
        )
        decided = await decide(client, org.admin, created["id"], comment="Ship it")
        assert decided["status"] == "approved"
        assert decided["callback_delivered"] is True
        # Attempt 1 ran before the answer: the receiver already has it.
        assert len(receiver.received) == 1
        request = receiver.received[0]

    assert request.method == "POST" and request.path == "/hook"
    headers = request.headers
    assert headers["content-type"] == "application/json"
    assert headers["x-token"] == "s3cret"
    assert headers["authorization"] == "Bearer downstream"
    assert headers["x-service-attempt"] == "1"
    assert headers["x-service-delivery-id"] == headers["webhook-id"]
    assert parse_id(headers["webhook-id"]) is not None
    assert abs(int(headers["webhook-timestamp"]) - time.time()) < 5
    secret = org.member.webhook_secret  # the creating connection's secret signs
    assert headers["x-service-signature"] == service_signature(secret, request.body)
    assert "x-service-signature-previous" not in headers
    # The Standard Webhooks headers, verified by the reference package itself.
    verified = Webhook(secret).verify(request.body, headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(org.admin.webhook_secret).verify(request.body, headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(request.body + b" ", headers)

    payload = orjson.loads(request.body)
    assert verified == payload
    assert decided["receipt"] is None and decided["receipt_issued"] is True
    read_back = (
        await client.get(f"/api/v1/approvals/{created['id']}", headers=org.member.headers)
    ).json()
    assert payload == {
        "event": "approval.decided",
        "id": created["id"],
        "request_id": created["id"],
        "status": "approved",
        "title": created["title"],
        "priority": "high",
        "action_type": "deploy.production",
        "decided_at": decided["decided_at"],
        "decided_by": {"id": org.admin.user_id, "email": org.admin.email, "name": org.admin.name},
        "decided_by_name": org.admin.name,
        "comment": "Ship it",
        "decision_comment": "Ship it",
        "metadata": {"sha": "abc123", "nested": {"n": [1, 2]}},
        # What the action runs with (none given: {}), as the receipt names it.
        "arguments": {},
        "arguments_hash": EMPTY_ARGUMENTS_HASH,
        "arguments_edited": False,
        # The approval's receipt (docs/receipts.md), signed as sent: the bytes a read
        # gives (the decision's answer only says it was issued).
        "receipt": read_back["receipt"],
    }

    [entry] = await delivery_log(client, org.member, created["id"])
    assert entry["delivery_id"] == headers["x-service-delivery-id"]
    assert entry["request_id"] == created["id"]
    assert entry["url"] == receiver.url
    assert entry["attempt"] == 1
    assert entry["success"] is True
    assert entry["status_code"] == 200
    assert entry["response_body"] == "ok"
    assert entry["error"] is None
    assert isinstance(entry["duration_ms"], int) and entry["duration_ms"] >= 0
    assert entry["created_at"].endswith("Z")
    events = await client.get(
        f"/api/v1/approvals/{created['id']}/events", headers=org.admin.headers
    )
    delivered = [e for e in events.json()["data"] if e["type"] == "callback.delivered"]
    assert len(delivered) == 1 and delivered[0]["data"]["delivery_id"] == entry["delivery_id"]


async def test_rejection_and_cancellation_are_delivered(
    client: httpx.AsyncClient, org: Org
) -> None:
    async with Receiver() as receiver:
        rejected = await create_approval(client, org.member, callback_url=receiver.url)
        answer = await decide(client, org.admin, rejected["id"], "reject")
        assert answer["callback_delivered"] is True
        cancelled = await create_approval(client, org.member, callback_url=receiver.url)
        response = await client.delete(
            f"/api/v1/approvals/{cancelled['id']}", headers=org.member.headers
        )
        assert response.status_code == 200, response.text
        assert response.json()["status"] == "cancelled"
        assert response.json()["callback_delivered"] is True
        first, second = [orjson.loads(r.body) for r in await receiver.wait_for(2)]
    assert first["status"] == "rejected" and first["request_id"] == rejected["id"]
    assert first["comment"] is None
    assert second["status"] == "cancelled" and second["request_id"] == cancelled["id"]
    assert second["decided_by"] == {
        "id": org.member.user_id,
        "email": org.member.email,
        "name": org.member.name,
    }
    assert second["decided_at"] == response.json()["cancelled_at"]


async def test_no_callback_url_means_nothing_delivered(client: httpx.AsyncClient, org: Org) -> None:
    created = await create_approval(client, org.member)
    answer = await decide(client, org.admin, created["id"])
    assert answer["callback_delivered"] is False
    assert await delivery_log(client, org.member, created["id"]) == []


async def test_a_vote_that_does_not_decide_sends_nothing(
    client: httpx.AsyncClient, org: Org
) -> None:
    async with Receiver() as receiver:
        created = await create_approval(
            client, org.member, callback_url=receiver.url, required_approvals=2
        )
        first = await decide(client, org.members[0], created["id"])
        assert first["status"] == "pending" and first["callback_delivered"] is False
        assert receiver.received == []
        second = await decide(client, org.members[1], created["id"])
        assert second["status"] == "approved" and second["callback_delivered"] is True
        [request] = await receiver.wait_for(1)
    assert orjson.loads(request.body)["decided_by"]["id"] == org.members[1].user_id


# ---- failures and retries ----


@pytest.mark.parametrize(
    "settings_overrides",
    [{"delivery_timeout_seconds": 2.0, "delivery_lease_seconds": 4.0}],  # the real schedule
)
async def test_receiver_down_four_attempts_at_0_1_3_7_s_then_failed_then_manual_retry(
    client: httpx.AsyncClient, ctx: AppContext, wiring: Wiring, org: Org
) -> None:
    clock = wiring.webhooks.clock = ManualClock()
    port = free_port()
    url = f"http://127.0.0.1:{port}/hook"
    created = await create_approval(client, org.member, callback_url=url)
    answer = await decide(client, org.admin, created["id"])
    assert answer["callback_delivered"] is False

    for delay in (1.0, 2.0, 4.0):
        attempted_at = clock.now
        delivery, _ = await retry_when_due(client, ctx, wiring, clock, org, created["id"])
        assert delivery.due_at - attempted_at == timedelta(seconds=delay)
    [delivery] = await stored_deliveries(ctx, created["id"])
    assert delivery.status == "failed"  # nothing more comes: 4 attempts are all there are
    entries = await delivery_log(client, org.member, created["id"])
    assert [e["attempt"] for e in entries] == [4, 3, 2, 1]  # newest first
    assert all(not e["success"] and e["status_code"] == 0 for e in entries)
    assert all(e["error"] == "connection refused" for e in entries)
    assert len({e["delivery_id"] for e in entries}) == 1
    times = [parse_timestamp(e["created_at"]) for e in reversed(entries)]
    assert [(t - times[0]).total_seconds() for t in times] == [0.0, 1.0, 3.0, 7.0]
    events = await client.get(
        f"/api/v1/approvals/{created['id']}/events", headers=org.admin.headers
    )
    assert [e["type"] for e in events.json()["data"]].count("callback.failed") == 1

    delivery_id = entries[0]["delivery_id"]
    # Only admins retry by hand.
    forbidden = await client.post(
        f"/api/v1/webhooks/{delivery_id}/retry", headers=org.member.headers
    )
    assert_error(forbidden, 403, "FORBIDDEN")
    async with Receiver(port=port) as receiver:
        retried = await client.post(
            f"/api/v1/webhooks/{delivery_id}/retry", headers=org.admin.headers
        )
        assert retried.status_code == 200, retried.text
        [request] = receiver.received
    body = retried.json()
    assert body["attempt"] == 5 and body["success"] is True and body["status_code"] == 200
    assert body["delivery_status"] == "succeeded"
    assert request.headers["x-service-attempt"] == "5"
    assert request.headers["x-service-delivery-id"] == delivery_id
    Webhook(org.member.webhook_secret).verify(request.body, request.headers)
    entries = await delivery_log(client, org.member, created["id"])
    assert [e["attempt"] for e in entries] == [5, 4, 3, 2, 1]
    assert entries[0]["success"] is True


async def test_receiver_that_fails_twice_then_recovers(
    client: httpx.AsyncClient, ctx: AppContext, wiring: Wiring, org: Org
) -> None:
    clock = wiring.webhooks.clock = ManualClock()
    failing = Reply(500, b'{"error": "database down"}')
    async with Receiver(replies=[failing, Reply(503, b"busy")]) as receiver:
        created = await create_approval(
            client, org.member, callback_url=receiver.url, callback_headers={"X-Token": "t0k"}
        )
        answer = await decide(client, org.admin, created["id"])
        assert answer["callback_delivered"] is False
        # The retry falls due 0.2 s after the first failure, the next 0.3 s after the second.
        for delay in (0.2, 0.3):
            attempted_at = clock.now
            delivery, entries = await retry_when_due(client, ctx, wiring, clock, org, created["id"])
            assert delivery.due_at - attempted_at == timedelta(seconds=delay)
        [delivery] = await stored_deliveries(ctx, created["id"])
        assert delivery.status == "succeeded"  # nothing is left to attempt
        requests = receiver.received
        assert len(requests) == 3
    assert [e["attempt"] for e in entries] == [3, 2, 1]
    assert [e["status_code"] for e in entries] == [200, 503, 500]
    assert [e["success"] for e in entries] == [True, False, False]
    assert entries[2]["response_body"] == '{"error": "database down"}'
    assert entries[2]["error"] == "non-2xx status"
    # One event, one body: the bytes are fixed when stored and resent unchanged.
    assert len({r.body for r in requests}) == 1
    assert len({r.headers["x-service-delivery-id"] for r in requests}) == 1
    assert [r.headers["x-service-attempt"] for r in requests] == ["1", "2", "3"]
    assert [r.headers["x-token"] for r in requests] == ["t0k"] * 3  # on every attempt
    for request in requests:
        Webhook(org.member.webhook_secret).verify(request.body, request.headers)


@pytest.mark.parametrize(
    "settings_overrides",
    [{**FAST, "delivery_timeout_seconds": 0.5, "delivery_lease_seconds": 2.0}],
)
async def test_a_hanging_receiver_is_cut_at_the_deadline(
    client: httpx.AsyncClient, org: Org
) -> None:
    async with Receiver(default=Reply(hang=True)) as receiver:
        created = await create_approval(client, org.member, callback_url=receiver.url)
        started = time.monotonic()
        answer = await decide(client, org.admin, created["id"])
        took = time.monotonic() - started
        assert answer["callback_delivered"] is False
        assert 0.45 < took < 1.5
        entries = await delivery_log(client, org.member, created["id"])
        receiver.release_hung()
    first = entries[-1]
    assert first["attempt"] == 1 and first["error"] == "timeout" and first["status_code"] == 0
    assert 450 <= first["duration_ms"] < 1200


async def test_redirects_are_not_followed(client: httpx.AsyncClient, org: Org) -> None:
    async with Receiver() as target:
        moved = Reply(302, b"", headers={"Location": target.url})
        async with Receiver(default=moved) as receiver:
            created = await create_approval(client, org.member, callback_url=receiver.url)
            answer = await decide(client, org.admin, created["id"])
            assert answer["callback_delivered"] is False
        assert target.received == []
    entry = (await delivery_log(client, org.member, created["id"]))[-1]
    assert entry["status_code"] == 302 and entry["error"] == "redirect not followed"


async def test_a_large_answer_is_read_up_to_the_cap_and_logged_truncated(
    client: httpx.AsyncClient, org: Org
) -> None:
    big = Reply(200, b"x" * 200_000)
    async with Receiver(default=big) as receiver:
        created = await create_approval(client, org.member, callback_url=receiver.url)
        answer = await decide(client, org.admin, created["id"])
    assert answer["callback_delivered"] is True
    [entry] = await delivery_log(client, org.member, created["id"])
    assert entry["response_body"] == "x" * 1024


# ---- expiry, emergency stop, rotation ----


async def test_expiry_sends_its_callback(client: httpx.AsyncClient, org: Org) -> None:
    expires = datetime.now(UTC) + timedelta(milliseconds=700)
    async with Receiver() as receiver:
        created = await create_approval(
            client,
            org.member,
            callback_url=receiver.url,
            expires_at=expires.isoformat().replace("+00:00", "Z"),
        )
        [request] = await receiver.wait_for(1, timeout=5)
    payload = orjson.loads(request.body)
    assert payload["status"] == "expired"
    assert payload["decided_by"] is None and payload["decided_by_name"] is None
    assert payload["decided_at"] == created["expires_at"]
    Webhook(org.member.webhook_secret).verify(request.body, request.headers)
    [entry] = await wait_for_log(client, org.member, created["id"], lambda e: len(e) == 1)
    assert entry["success"] is True


async def test_emergency_stop_with_cancel_pending_sends_one_callback_each(
    client: httpx.AsyncClient, ctx: AppContext, org: Org
) -> None:
    async with Receiver() as receiver:
        ids = {(await create_approval(client, org.member, callback_url=receiver.url))["id"]}
        ids |= {(await create_approval(client, org.admin, callback_url=receiver.url))["id"]}
        ids |= {(await create_approval(client, org.member, callback_url=receiver.url))["id"]}
        await create_approval(client, org.member)  # no callback_url: nothing to send
        response = await client.put(
            "/api/v1/emergency-stop",
            json={"active": True, "cancel_pending": True},
            headers=org.admin.headers,
        )
        assert response.status_code == 200, response.text
        assert response.json()["cancelled"] == 4
        requests = await receiver.wait_for(3, timeout=5)
        await eventually(lambda: all_finished(ctx), "every callback to be recorded")
        assert len(receiver.received) == 3  # each delivered once, nothing left to send
    payloads = [orjson.loads(r.body) for r in requests]
    assert {p["request_id"] for p in payloads} == ids
    assert {p["status"] for p in payloads} == {"cancelled"}
    assert all(p["decided_by"]["id"] == org.admin.user_id for p in payloads)


async def test_a_rotated_secret_keeps_signing_beside_the_new_one_for_its_grace_period(
    client: httpx.AsyncClient, ctx: AppContext, org: Org
) -> None:
    old = org.member.webhook_secret

    async def rotate(grace: timedelta) -> str:
        async with ctx.transaction() as uow:
            connection = await orgs_service.get_connection(
                uow.orgs,
                parse_id(org.id),
                org.member.connection_id,  # type: ignore[arg-type]
            )
            return await orgs_service.rotate_webhook_secret(connection, ctx.box, grace, utcnow())

    new = await rotate(timedelta(hours=1))
    async with Receiver() as receiver:
        created = await create_approval(client, org.member, callback_url=receiver.url)
        await decide(client, org.admin, created["id"])
        [request] = receiver.received
    Webhook(new).verify(request.body, request.headers)
    Webhook(old).verify(request.body, request.headers)
    assert len(request.headers["webhook-signature"].split(" ")) == 2
    assert request.headers["x-service-signature"] == service_signature(new, request.body)
    assert request.headers["x-service-signature-previous"] == service_signature(old, request.body)

    newest = await rotate(timedelta(0))  # no grace: the previous secret stops at once
    async with Receiver() as receiver:
        created = await create_approval(client, org.member, callback_url=receiver.url)
        await decide(client, org.admin, created["id"])
        [request] = receiver.received
    Webhook(newest).verify(request.body, request.headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(new).verify(request.body, request.headers)
    assert "x-service-signature-previous" not in request.headers


# ---- create-time rules, the log API, test-webhook ----


@pytest.mark.parametrize(
    "name",
    [
        "X-Service-Signature",
        "x-service-attempt",
        "X-Service-Delivery-Id",
        "X-Service-Signature-Previous",
        "webhook-id",
        "Webhook-Signature",
        "webhook-timestamp",
        "Content-Type",
        "Host",
    ],
)
async def test_reserved_callback_headers_are_refused(
    client: httpx.AsyncClient, org: Org, name: str
) -> None:
    response = await client.post(
        "/api/v1/approvals",
        json={
            "title": "t",
            "description": "d",
            "priority": "low",
            "callback_url": "https://example.com/hook",
            "callback_headers": {name: "forged"},
        },
        headers=org.member.headers,
    )
    details = assert_error(response, 400, "VALIDATION_ERROR")
    assert details["fields"][0]["field"] == "callback_headers"


async def test_the_log_is_newest_first_limited_and_scoped_to_the_org(
    client: httpx.AsyncClient, org: Org, other_org: Org
) -> None:
    async with Receiver() as receiver:
        first = await create_approval(client, org.member, callback_url=receiver.url)
        second = await create_approval(client, org.member, callback_url=receiver.url)
        await decide(client, org.admin, first["id"])
        await decide(client, org.admin, second["id"])
    entries = await delivery_log(client, org.member)
    assert [e["request_id"] for e in entries] == [second["id"], first["id"]]
    assert [e["request_id"] for e in await delivery_log(client, org.member, limit=1)] == [
        second["id"]
    ]
    assert [e["request_id"] for e in await delivery_log(client, org.member, first["id"])] == [
        first["id"]
    ]
    assert await delivery_log(client, other_org.member) == []
    assert await delivery_log(client, other_org.member, first["id"]) == []
    for params in ({"limit": "0"}, {"limit": "101"}, {"limit": "x"}, {"request_id": "nope"}):
        response = await client.get("/api/v1/webhooks", params=params, headers=org.member.headers)
        assert_error(response, 400, "VALIDATION_ERROR")
    # Another org's delivery cannot be retried (or even seen) from here.
    delivery_id = entries[0]["delivery_id"]
    response = await client.post(
        f"/api/v1/webhooks/{delivery_id}/retry", headers=other_org.admin.headers
    )
    assert_error(response, 404, "NOT_FOUND")
    response = await client.post("/api/v1/webhooks/not-an-id/retry", headers=org.admin.headers)
    assert_error(response, 404, "NOT_FOUND")


async def test_a_delivery_on_its_schedule_cannot_be_retried_by_hand(
    client: httpx.AsyncClient, org: Org
) -> None:
    created = await create_approval(
        client, org.member, callback_url=f"http://127.0.0.1:{free_port()}/hook"
    )
    await decide(client, org.admin, created["id"])
    [entry] = await delivery_log(client, org.member, created["id"])
    response = await client.post(
        f"/api/v1/webhooks/{entry['delivery_id']}/retry", headers=org.admin.headers
    )
    details = assert_error(response, 409, "CONFLICT")
    assert details["status"] == "pending"


async def test_test_webhook_sends_a_signed_sample(client: httpx.AsyncClient, org: Org) -> None:
    async with Receiver() as receiver:
        response = await client.post(
            "/api/v1/test-webhook", json={"url": receiver.url}, headers=org.member.headers
        )
        assert response.status_code == 200, response.text
        [request] = receiver.received
    body = response.json()
    assert body["success"] is True and body["status_code"] == 200 and body["error"] is None
    assert isinstance(body["duration_ms"], int)
    payload = Webhook(org.member.webhook_secret).verify(request.body, request.headers)
    assert payload["test"] is True and payload["event"] == "approval.decided"
    assert set(payload) >= {"request_id", "status", "title", "priority", "decided_by", "metadata"}
    assert request.headers["x-service-signature"] == service_signature(
        org.member.webhook_secret, request.body
    )
    down = await client.post(
        "/api/v1/test-webhook",
        json={"url": f"http://127.0.0.1:{free_port()}/"},
        headers=org.member.headers,
    )
    assert down.status_code == 200
    assert down.json()["success"] is False and down.json()["error"] == "connection refused"
    for bad in ({}, {"url": "ftp://example.com"}, {"url": "not a url"}):
        response = await client.post("/api/v1/test-webhook", json=bad, headers=org.member.headers)
        assert_error(response, 400, "VALIDATION_ERROR")


@pytest.mark.parametrize(
    "settings_overrides",
    [
        {
            **FAST,
            "delivery_timeout_seconds": 3.0,
            "delivery_lease_seconds": 6.0,
            "delivery_per_target_concurrency": 2,
        }
    ],
)
async def test_a_hanging_receiver_does_not_delay_the_others(
    client: httpx.AsyncClient, org: Org
) -> None:
    """Ten due deliveries to a receiver that hangs, queued before one to a healthy receiver:
    the hanging one gets two attempts at a time, the healthy one is served at once."""
    async with (
        Receiver(default=Reply(hang=True)) as stuck,
        Receiver(replies=[Reply(500)]) as healthy,
    ):
        for _ in range(10):
            await create_approval(client, org.member, callback_url=stuck.url)
        response = await client.put(
            "/api/v1/emergency-stop",
            json={"active": True, "cancel_pending": True},
            headers=org.admin.headers,
        )
        assert response.json()["cancelled"] == 10
        await stuck.wait_for(2, timeout=5)
        await client.put(
            "/api/v1/emergency-stop", json={"active": False}, headers=org.admin.headers
        )
        created = await create_approval(client, org.member, callback_url=healthy.url)
        answer = await decide(client, org.admin, created["id"])
        assert answer["callback_delivered"] is False  # attempt 1 got a 500
        first_failure = time.monotonic()
        # The retry, due 0.2 s later behind eight overdue deliveries to the stuck receiver.
        await healthy.wait_for(2, timeout=2)
        assert time.monotonic() - first_failure < 1.0
        assert len(stuck.received) == 2  # the cap held: the other eight still wait
        stuck.release_hung()


async def test_the_step_vote_that_completes_a_chain_delivers_the_callback(
    client: httpx.AsyncClient, org: Org
) -> None:
    first, second = org.members[0], org.members[1]
    async with Receiver() as receiver:
        created = await create_approval(client, org.member, callback_url=receiver.url)
        chain = await client.post(
            f"/api/v1/approvals/{created['id']}/steps",
            json={
                "steps": [
                    {"approver_id": first.user_id, "step_order": 1},
                    {"approver_id": second.user_id, "step_order": 2},
                ]
            },
            headers=org.admin.headers,
        )
        assert chain.status_code == 201, chain.text
        steps = chain.json()["data"]
        votes = []
        for who, step in ((first, steps[0]), (second, steps[1])):
            response = await client.patch(
                f"/api/v1/approvals/{created['id']}/steps/{step['id']}",
                json={"decision": "approve", "comment": f"ok from {who.name}"},
                headers=who.headers,
            )
            assert response.status_code == 200, response.text
            votes.append(response.json())
        assert votes[0]["callback_delivered"] is False
        assert votes[1]["callback_delivered"] is True
        [request] = receiver.received
    payload = orjson.loads(request.body)
    assert payload["status"] == "approved"
    assert payload["decided_by"]["id"] == second.user_id
    assert payload["comment"] == f"ok from {second.name}"
