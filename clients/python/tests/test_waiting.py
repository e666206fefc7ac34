"""``wait_for_decision``: one long poll per wait, through drops, 429s and time running out."""

from __future__ import annotations

import time

import pytest

from conftest import FaultProxy, LiveServer, in_thread, join_ok
from signoff_client import SignoffClient, WaitTimeout


def test_returns_when_someone_decides(
    live: LiveServer, admin: SignoffClient, member: SignoffClient, proxy: FaultProxy
) -> None:
    created = admin.create_approval("Ship it?", "d", "high")
    with proxy.client(live.admin.api_key) as waiter:
        # Decide once the long poll is on the wire (the proxy has seen its connection).
        decider = in_thread(
            lambda: (proxy.wait_for_connections(1), member.decide(created.id, "reject", "no"))
        )
        started = time.monotonic()
        decided = waiter.wait_for_decision(created.id, timeout=30)
        elapsed = time.monotonic() - started
    join_ok(decider)
    assert (decided.status, decided.decision_comment, decided.decided_by_name) == (
        "rejected",
        "no",
        "Bob",
    )
    assert elapsed < 10
    assert len(proxy.seen) == 1  # one held request, not a polling loop


def test_returns_at_once_for_a_decided_request(admin: SignoffClient, member: SignoffClient) -> None:
    created = admin.create_approval("Already done", "d", "low")
    member.decide(created.id, "approve")
    started = time.monotonic()
    assert admin.wait_for_decision(created.id, timeout=30).status == "approved"
    assert time.monotonic() - started < 2


def test_expiry_ends_the_wait(admin: SignoffClient) -> None:
    from datetime import UTC, datetime, timedelta

    created = admin.create_approval(
        "Soon stale", "d", "low", expires_at=datetime.now(UTC) + timedelta(seconds=1.5)
    )
    decided = admin.wait_for_decision(created.id, timeout=30)
    assert decided.status == "expired" and decided.decided_by is None


def test_times_out(admin: SignoffClient) -> None:
    created = admin.create_approval("Nobody looks", "d", "low")
    started = time.monotonic()
    with pytest.raises(WaitTimeout) as caught:
        admin.wait_for_decision(created.id, timeout=1.5)
    elapsed = time.monotonic() - started
    assert 1.4 <= elapsed < 5
    assert caught.value.approval is not None and caught.value.approval.status == "pending"
    assert created.id in str(caught.value)


def test_survives_dropped_connections(
    live: LiveServer, admin: SignoffClient, member: SignoffClient, proxy: FaultProxy
) -> None:
    created = admin.create_approval("Through a flaky network", "d", "high")
    proxy.script.extend(["drop", "drop", "502"])
    with proxy.client(live.admin.api_key) as waiter:
        decider = in_thread(
            lambda: (proxy.wait_for_connections(4), member.decide(created.id, "approve"))
        )
        decided = waiter.wait_for_decision(created.id, timeout=60)
    join_ok(decider)
    assert decided.status == "approved"
    assert [action for _, action in proxy.seen] == ["drop", "drop", "502", "forward"]


def test_honours_retry_after(
    live: LiveServer, admin: SignoffClient, member: SignoffClient, proxy: FaultProxy
) -> None:
    created = admin.create_approval("Behind a busy gateway", "d", "low")
    member.decide(created.id, "approve")
    proxy.script.append("429")  # Retry-After: 1
    with proxy.client(live.admin.api_key) as waiter:
        assert waiter.wait_for_decision(created.id, timeout=30).status == "approved"
    (limited_at, first), (retried_at, second) = proxy.seen
    assert (first, second) == ("429", "forward")
    assert retried_at - limited_at >= 0.95
