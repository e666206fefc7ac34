"""Expiry (decisions.md section 3): expired at the deadline for every read and write, and
written down by the sweep with decided_at = expires_at and a request.expired event."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import orjson
import pytest

from signoff.common.poison import PoisonedRows
from signoff.common.time import format_timestamp, utcnow
from signoff.context import AppContext
from signoff.notifications.planning import service as notifications
from signoff.notifications.repository import NotificationRepository
from signoff.wiring import Wiring
from signoff.worker.sweeper import sweep_expired_once
from tests.conftest import Org, assert_error, create_approval
from tests.helpers import (
    NO_SWEEP,
    CallbackReceiver,
    backdate_expiry,
    stored_events,
    stored_request,
)
from tests.notifications.test_flow import put_routing, routing

BACKGROUND_SWEEP = {"expiry_sweep_interval_seconds": 0.05}
NOWHERE = "http://127.0.0.1:9/hook"  # nothing is sent: no sender runs


@pytest.fixture
def settings_overrides(request: pytest.FixtureRequest) -> dict[str, Any]:
    # Most tests look at a request past its deadline before any sweep has run.
    overrides: dict[str, Any] = getattr(request, "param", NO_SWEEP)
    return overrides


def _in(delta: timedelta) -> str:
    return (datetime.now(UTC) + delta).isoformat()


async def _expired_unswept(
    client: httpx.AsyncClient, org: Org, ctx: AppContext, **overrides: Any
) -> tuple[dict[str, Any], str]:
    created = await create_approval(
        client, org.member, expires_at=_in(timedelta(hours=1)), **overrides
    )
    deadline = await backdate_expiry(ctx, created["id"])
    return created, format_timestamp(deadline) or ""


async def test_past_the_deadline_it_reads_expired_at_once(
    client: httpx.AsyncClient, org: Org, ctx: AppContext
) -> None:
    created, deadline = await _expired_unswept(client, org, ctx)
    read = await client.get(f"/api/v1/approvals/{created['id']}", headers=org.member.headers)
    body = read.json()
    assert body["status"] == "expired"
    assert body["decided_at"] == body["expires_at"] == deadline
    assert body["decided_by"] is None and body["decided_by_name"] is None
    listing = (await client.get("/api/v1/approvals", headers=org.member.headers)).json()
    assert listing["data"][0]["status"] == "expired"
    # Only reads say so: nothing is written before the sweep.
    assert (await stored_request(ctx, created["id"])).status == "pending"


async def test_decide_and_cancel_refuse_with_status_expired(
    client: httpx.AsyncClient, org: Org, ctx: AppContext
) -> None:
    created, _ = await _expired_unswept(client, org, ctx, required_approvals=2)
    url = f"/api/v1/approvals/{created['id']}"
    for response in (
        await client.patch(url, headers=org.admin.headers, json={"decision": "approve"}),
        await client.patch(url, headers=org.admin.headers, json={"decision": "reject"}),
        await client.delete(url, headers=org.admin.headers),
    ):
        assert assert_error(response, 409, "REQUEST_NOT_PENDING")["status"] == "expired"
    stored = await stored_request(ctx, created["id"])
    assert (stored.status, stored.current_approvals, stored.decided_at) == ("pending", 0, None)
    assert [e["type"] for e in await stored_events(ctx, created["id"])] == ["request.created"]


async def test_the_sweep_writes_it_down(
    api_only: httpx.AsyncClient, org: Org, ctx: AppContext, wiring: Wiring
) -> None:
    created, deadline = await _expired_unswept(api_only, org, ctx)
    live = await create_approval(api_only, org.member, expires_at=_in(timedelta(hours=1)))
    forever = await create_approval(api_only, org.member)
    before = await api_only.get(f"/api/v1/approvals/{created['id']}", headers=org.admin.headers)

    assert await sweep_expired_once(ctx, wiring.poisoned) == 1
    stored = await stored_request(ctx, created["id"])
    assert stored.status == "expired"
    assert format_timestamp(stored.decided_at) == deadline  # at the deadline, not at the sweep
    assert stored.decided_by is None
    events = await stored_events(ctx, created["id"])
    assert [(e["type"], e["actor_id"]) for e in events] == [
        ("request.created", events[0]["actor_id"]),
        ("request.expired", None),
    ]
    assert events[1]["data"]["status"] == "expired"
    # What readers saw before the sweep is what they see after it.
    after = await api_only.get(f"/api/v1/approvals/{created['id']}", headers=org.admin.headers)
    for key in ("status", "decided_at", "decided_by", "expires_at"):
        assert after.json()[key] == before.json()[key], key
    # Requests still in time, or without a deadline, are left alone; a second sweep is idle.
    assert await sweep_expired_once(ctx, wiring.poisoned) == 0
    assert (await stored_request(ctx, live["id"])).status == "pending"
    assert (await stored_request(ctx, forever["id"])).status == "pending"


async def test_decided_requests_past_their_deadline_are_not_swept(
    client: httpx.AsyncClient, org: Org, ctx: AppContext, wiring: Wiring
) -> None:
    created = await create_approval(client, org.member, expires_at=_in(timedelta(hours=1)))
    await client.patch(
        f"/api/v1/approvals/{created['id']}",
        headers=org.admin.headers,
        json={"decision": "approve"},
    )
    await backdate_expiry(ctx, created["id"])
    read = await client.get(f"/api/v1/approvals/{created['id']}", headers=org.admin.headers)
    assert read.json()["status"] == "approved"
    assert await sweep_expired_once(ctx, wiring.poisoned) == 0
    assert (await stored_request(ctx, created["id"])).status == "approved"


async def _expiry_events(ctx: AppContext, request_ids: list[str]) -> list[list[str]]:
    return [[e["type"] for e in await stored_events(ctx, i)] for i in request_ids]


async def test_concurrent_sweeps_expire_each_request_once(
    api_only: httpx.AsyncClient, org: Org, ctx: AppContext, wiring: Wiring
) -> None:
    # Only the sweeps hold these rows: the first to lock one expires it, the others pass
    # it over (PostgreSQL) or find it expired (SQLite), so one round takes all of them.
    ids = [(await _expired_unswept(api_only, org, ctx))[0]["id"] for _ in range(6)]
    counts = await asyncio.gather(*(sweep_expired_once(ctx, wiring.poisoned) for _ in range(3)))
    assert sum(counts) == 6
    assert await _expiry_events(ctx, ids) == [["request.created", "request.expired"]] * 6


# On SQLite the planner holds the one writer: a sweep waits for it instead.
@pytest.mark.usefixtures("postgres_only")
async def test_a_request_being_planned_is_expired_once_by_a_later_sweep(
    api_only: httpx.AsyncClient, org: Org, ctx: AppContext, wiring: Wiring
) -> None:
    """Why the test above runs the API without its background loops (it failed under
    load with them): the notification sender's planning transaction share-locks the
    requests it writes notifications for, and the sweeps' SKIP LOCKED passes over them.
    They stay pending (reads already show them expired) until a sweep after the planning
    commits, and are expired once."""
    await put_routing(api_only, org, routing(NOWHERE, NOWHERE, NOWHERE))
    notified = {"action_type": "deploy.production", "priority": "high"}  # a rule matches
    planned_ids = [
        (await _expired_unswept(api_only, org, ctx, **notified))[0]["id"] for _ in range(5)
    ]
    async with ctx.db.write_transaction() as session:
        repo = NotificationRepository(session, ctx.db.dialect)
        assert await notifications.plan_waiting(repo, utcnow(), 100, PoisonedRows()) == 5
        # The planning holds its locks here, as the sender's did in the failed runs
        # while the test created its last request and swept:
        later = (await _expired_unswept(api_only, org, ctx, **notified))[0]["id"]
        # Bounded: a sweep that waited on the planning's locks would wait on this block.
        counts = await asyncio.wait_for(
            asyncio.gather(*(sweep_expired_once(ctx, wiring.poisoned) for _ in range(3))),
            timeout=10,
        )
        assert sum(counts) == 1
        statuses = [(await stored_request(ctx, i)).status for i in planned_ids]
        assert statuses == ["pending"] * 5
    counts = await asyncio.gather(*(sweep_expired_once(ctx, wiring.poisoned) for _ in range(3)))
    assert sum(counts) == 5
    events = await _expiry_events(ctx, [*planned_ids, later])
    assert events == [["request.created", "request.expired"]] * 6


@pytest.mark.parametrize("settings_overrides", [BACKGROUND_SWEEP], indirect=True)
async def test_the_background_sweep_expires_requests_as_their_deadline_passes(
    client: httpx.AsyncClient, org: Org, ctx: AppContext
) -> None:
    created = await create_approval(client, org.member, expires_at=_in(timedelta(seconds=1)))
    assert created["status"] == "pending"
    deadline = time.monotonic() + 15
    while (stored := await stored_request(ctx, created["id"])).status == "pending":
        assert time.monotonic() < deadline, "the sweep did not expire the request"
        await asyncio.sleep(0.05)
    assert stored.status == "expired"
    assert format_timestamp(stored.decided_at) == created["expires_at"]
    types = [e["type"] for e in await stored_events(ctx, created["id"])]
    assert types == ["request.created", "request.expired"]


@pytest.mark.parametrize("settings_overrides", [BACKGROUND_SWEEP], indirect=True)
async def test_expiry_sends_the_decision_callback(
    client: httpx.AsyncClient, org: Org, ctx: AppContext
) -> None:
    async with CallbackReceiver(200) as receiver:
        created = await create_approval(
            client, org.member, callback_url=receiver.url, expires_at=_in(timedelta(hours=1))
        )
        deadline = format_timestamp(await backdate_expiry(ctx, created["id"]))
        give_up = time.monotonic() + 15
        while not receiver.bodies:
            assert time.monotonic() < give_up, "no expiry callback arrived"
            await asyncio.sleep(0.05)
    payload = orjson.loads(receiver.bodies[0])
    assert payload["event"] == "approval.decided"
    assert payload["request_id"] == created["id"]
    assert payload["status"] == "expired"
    assert payload["decided_by"] is None
    assert payload["decided_at"] == deadline
