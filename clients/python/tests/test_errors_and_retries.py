"""Typed errors from a live server, and the retries around the network's failures."""

from __future__ import annotations

import time
import uuid

import pytest

from conftest import FaultProxy, LiveServer
from signoff_client import (
    AlreadyVoted,
    APIConnectionError,
    APIError,
    Conflict,
    EmergencyStop,
    Forbidden,
    NotFound,
    RateLimited,
    RequestNotPending,
    ServerError,
    SignoffClient,
    SignoffError,
    Unauthorized,
    ValidationError,
    WaitTimeout,
)


def test_not_found(admin: SignoffClient) -> None:
    with pytest.raises(NotFound) as caught:
        admin.get_approval(str(uuid.uuid4()))
    error = caught.value
    assert (error.status_code, error.status, error.code) == (404, 404, "NOT_FOUND")
    assert error.message and isinstance(error.details, dict)
    assert isinstance(error, APIError) and isinstance(error, SignoffError)
    with pytest.raises(NotFound):
        admin.get_approval("not-a-uuid/../../me")  # quoted into the path, never traversed


def test_validation_error_names_the_fields(admin: SignoffClient) -> None:
    with pytest.raises(ValidationError) as caught:
        admin.create_approval("  ", "d", "urgent")
    error = caught.value
    assert (error.status_code, error.code) == (400, "VALIDATION_ERROR")
    assert {f["field"] for f in error.fields} >= {"title", "priority"}
    with pytest.raises(ValidationError):
        admin.decide(admin.create_approval("t", "d", "low").id, "maybe")


def test_request_not_pending_and_already_voted(admin: SignoffClient, member: SignoffClient) -> None:
    two = admin.create_approval("Two keys", "d", "high", required_approvals=2)
    member.decide(two.id, "approve")
    with pytest.raises(AlreadyVoted) as voted:
        member.decide(two.id, "approve")
    assert (voted.value.status_code, voted.value.code) == (409, "ALREADY_VOTED")
    assert isinstance(voted.value, Conflict)

    admin.decide(two.id, "approve")
    with pytest.raises(RequestNotPending) as caught:
        admin.cancel(two.id)
    assert (
        caught.value.request_status == "approved" and caught.value.details["status"] == "approved"
    )


def test_forbidden_and_unauthorized(
    live: LiveServer, admin: SignoffClient, member: SignoffClient
) -> None:
    created = admin.create_approval("Admin's", "d", "low")
    with pytest.raises(Forbidden) as caught:  # only an admin or the creator sets steps
        member.set_steps(created.id, [live.member.user_id])
    assert (caught.value.status_code, caught.value.code) == (403, "FORBIDDEN")

    with (
        SignoffClient(live.base_url, "gk_" + "0" * 64) as stranger,
        pytest.raises(Unauthorized) as refused,
    ):
        stranger.get_approval(created.id)
    assert (refused.value.status_code, refused.value.code) == (401, "UNAUTHORIZED")
    with (
        SignoffClient(live.base_url, oauth_token="not-a-token") as stranger,
        pytest.raises(Unauthorized),
    ):
        stranger.get_approval(created.id)


def test_emergency_stop_is_not_retried(live: LiveServer, admin: SignoffClient) -> None:
    live.cli("emergency-stop", "on", "--org", live.org_id)
    try:
        started = time.monotonic()
        with pytest.raises(EmergencyStop) as caught:
            admin.create_approval("During the stop", "d", "low", idempotency_key=True)
        assert (caught.value.status_code, caught.value.code) == (503, "EMERGENCY_STOP")
        assert isinstance(caught.value, ServerError)
        assert time.monotonic() - started < 2  # refused at once, not retried with backoff
    finally:
        live.cli("emergency-stop", "off", "--org", live.org_id)
    assert admin.create_approval("After the stop", "d", "low").status == "pending"


def test_rate_limited(live: LiveServer) -> None:
    connection = live.cli(
        "connection", "create", "--org", live.org_id, "--owner", live.admin.user_id,
        "--name", f"tiny-{uuid.uuid4().hex[:6]}",
    )  # fmt: skip
    live.cli("connection", "set-rate-limit", connection["id"], "3", "--org", live.org_id)
    with SignoffClient(live.base_url, connection["api_key"]) as tiny:
        created = tiny.create_approval("Limited", "d", "low")
        tiny.get_approval(created.id)
        tiny.get_approval(created.id)
        with pytest.raises(RateLimited) as caught:
            tiny.get_approval(created.id)
        error = caught.value
        assert (error.status_code, error.code) == (429, "RATE_LIMITED")
        assert 0 < error.retry_after <= 3600
        assert error.headers["retry-after"] == str(int(error.retry_after))

        # The long poll honours Retry-After: an hour's wait does not fit in 5 seconds,
        # so the wait ends at once instead of hammering the server.
        started = time.monotonic()
        with pytest.raises(WaitTimeout) as timed_out:
            tiny.wait_for_decision(created.id, timeout=5)
        assert time.monotonic() - started < 2
        assert isinstance(timed_out.value.__cause__, RateLimited)


# ---- the network's failures, through a loopback proxy that makes them ----


def test_reads_are_retried_after_5xx_and_dropped_connections(
    live: LiveServer, admin: SignoffClient, proxy: FaultProxy
) -> None:
    created = admin.create_approval("Read me", "d", "low")
    proxy.script.extend(["502", "drop"])
    with proxy.client(live.admin.api_key) as client:
        assert client.get_approval(created.id).id == created.id
    assert [action for _, action in proxy.seen] == ["502", "drop", "forward"]

    proxy.script.extend(["502"] * 3)
    with proxy.client(live.admin.api_key, retries=2) as client, pytest.raises(ServerError):
        client.get_approval(created.id)


def test_writes_without_a_key_are_not_resent(
    live: LiveServer, admin: SignoffClient, proxy: FaultProxy, tag: str
) -> None:
    proxy.script.append("swallow")  # the server creates it; the answer never arrives
    with proxy.client(live.admin.api_key) as client, pytest.raises(APIConnectionError):
        client.create_approval("Unsure", "d", "low", source=tag)
    assert len(proxy.seen) == 1
    assert len(list(admin.list_approvals(source=tag))) == 1

    proxy.script.append("502")
    with proxy.client(live.admin.api_key) as client, pytest.raises(ServerError):
        client.decide(admin.create_approval("t", "d", "low").id, "approve")
    assert len(proxy.seen) == 2  # not retried: a second vote could count twice


def test_a_create_with_a_key_is_retried_and_made_once(
    live: LiveServer, admin: SignoffClient, proxy: FaultProxy, tag: str
) -> None:
    proxy.script.extend(["swallow", "502"])
    with proxy.client(live.admin.api_key) as client:
        created = client.create_approval("Exactly once", "d", "low", source=tag,
                                         idempotency_key=True)  # fmt: skip
    assert [action for _, action in proxy.seen] == ["swallow", "502", "forward"]
    assert [a.id for a in admin.list_approvals(source=tag)] == [created.id]


def test_connection_refused_is_a_connection_error() -> None:
    from conftest import free_port

    nowhere = f"http://127.0.0.1:{free_port()}"
    with (
        SignoffClient(nowhere, "gk_" + "1" * 64, retries=1) as client,
        pytest.raises(APIConnectionError),
    ):
        client.create_approval("Nobody home", "d", "low")
