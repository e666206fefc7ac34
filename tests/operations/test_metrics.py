"""``GET /metrics``: what an operator's Prometheus scrapes, read back as Prometheus parses it."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import httpx
import pytest
from bench.receiver import Receiver, Reply
from prometheus_client.parser import text_string_to_metric_families

from signoff.app import create_app
from signoff.common.poison import PoisonedRows
from signoff.common.time import format_timestamp, utcnow
from signoff.config import Settings
from signoff.context import AppContext
from signoff.wiring import Wiring
from tests.conftest import Org, assert_error, create_approval
from tests.helpers import NO_SWEEP, backdate_expiry


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    # Unswept deadlines stay overdue (the sweep lag), failed callbacks wait for a retry.
    return {**NO_SWEEP, "delivery_retry_delays_seconds": [3600.0]}


Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


async def scrape(client: httpx.AsyncClient, **headers: str) -> Samples:
    response = await client.get("/metrics", headers=headers)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


async def test_requests_are_counted_by_route_template_and_status(
    client: httpx.AsyncClient, org: Org
) -> None:
    before = await scrape(client)
    created = await create_approval(client, org.member)
    for _ in range(2):
        read = await client.get(f"/api/v1/approvals/{created['id']}", headers=org.member.headers)
        assert read.status_code == 200
    refused = await client.get(f"/api/v1/approvals/{created['id']}")
    assert refused.status_code == 401
    after = await scrape(client)

    def delta(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    route = "/api/v1/approvals/{request_id}"
    total = "signoff_http_requests_total"
    assert delta(total, method="POST", route="/api/v1/approvals", status="201") == 1
    assert delta(total, method="GET", route=route, status="200") == 2
    # Refused before routing, still counted under the route it was meant for.
    assert delta(total, method="GET", route=route, status="401") == 1
    assert delta("signoff_http_request_duration_seconds_count", method="GET", route=route) == 3
    # No series names a raw path.
    assert not any(created["id"] in dict(labels).get("route", "") for _, labels in after)


async def test_decisions_callbacks_and_the_delivery_queue(
    client: httpx.AsyncClient, org: Org
) -> None:
    before = await scrape(client)
    async with Receiver(default=Reply(500)) as receiver:
        for decision in ("approve", "reject"):
            created = await create_approval(client, org.member, callback_url=receiver.url)
            answer = await client.patch(
                f"/api/v1/approvals/{created['id']}",
                json={"decision": decision},
                headers=org.admin.headers,
            )
            assert answer.json()["callback_delivered"] is False
    after = await scrape(client)

    def delta(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert delta("signoff_decisions_total", outcome="approved") == 1
    assert delta("signoff_decisions_total", outcome="rejected") == 1
    assert delta("signoff_callback_attempts_total", outcome="non-2xx status") == 2
    assert delta("signoff_callback_attempt_duration_seconds_count") == 2
    # Both wait for their retry an hour from now: pending, not yet due.
    assert value(after, "signoff_callback_deliveries_pending") == 2
    assert value(after, "signoff_callback_deliveries_due") == 0


async def test_the_expiry_sweep_lag_and_poisoned_rows(
    client: httpx.AsyncClient, ctx: AppContext, org: Org
) -> None:
    assert value(await scrape(client), "signoff_expiry_sweep_lag_seconds") == 0
    deadline = format_timestamp(utcnow() + timedelta(hours=1))
    created = await create_approval(client, org.member, expires_at=deadline)
    await backdate_expiry(ctx, created["id"], ago=timedelta(seconds=90))
    lag = value(await scrape(client), "signoff_expiry_sweep_lag_seconds")
    assert 90 <= lag < 150

    before = value(await scrape(client), "signoff_poisoned_rows_total", job="expiry")
    PoisonedRows().park("expiry", uuid.uuid4(), RuntimeError("no encoder takes this row"))
    after = value(await scrape(client), "signoff_poisoned_rows_total", job="expiry")
    assert after == before + 1


async def test_database_pool_use_is_reported(client: httpx.AsyncClient, backend: str) -> None:
    samples = await scrape(client)
    engines = {"read", "write"} if backend == "sqlite" else {"shared"}
    for engine in engines:
        assert value(samples, "signoff_db_pool_size", engine=engine) >= 1
        assert ("signoff_db_pool_checked_out", frozenset({("engine", engine)})) in samples


async def test_metrics_need_no_api_key_and_are_not_rate_limited(
    client: httpx.AsyncClient,
) -> None:
    for _ in range(3):
        response = await client.get("/metrics")
        assert response.status_code == 200
        assert "x-ratelimit-limit" not in response.headers


@pytest.fixture
async def token_client(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    wiring = Wiring.from_settings(settings.model_copy(update={"metrics_token": "scrape-me"}))
    application = create_app(wiring.ctx.settings, wiring=wiring, background=False)
    transport = httpx.ASGITransport(app=application)
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://signoff.test") as c:
            yield c
    finally:
        await wiring.close()


async def test_a_metrics_token_is_required_when_set(token_client: httpx.AsyncClient) -> None:
    assert_error(await token_client.get("/metrics"), 401, "UNAUTHORIZED")
    wrong = await token_client.get("/metrics", headers={"Authorization": "Bearer nope"})
    assert_error(wrong, 401, "UNAUTHORIZED")
    samples = await scrape(token_client, Authorization="Bearer scrape-me")
    assert ("signoff_callback_deliveries_pending", frozenset()) in samples


async def test_metrics_can_be_switched_off(settings: Settings, org: Org) -> None:
    wiring = Wiring.from_settings(settings.model_copy(update={"metrics_enabled": False}))
    application = create_app(wiring.ctx.settings, wiring=wiring, background=False)
    transport = httpx.ASGITransport(app=application)
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://signoff.test") as c:
            assert_error(await c.get("/metrics"), 404, "NOT_FOUND")
            listed = await c.get("/api/v1/approvals", headers=org.member.headers)
            assert listed.status_code == 200
    finally:
        await wiring.close()
