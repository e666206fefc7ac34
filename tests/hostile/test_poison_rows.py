"""No single row blocks work for others (issue: hostile input).

A row that cannot be processed is planted straight into the database (metadata nested
deeper than any encoder takes, as an older release accepted). The expiry sweep, the
emergency stop's cancellations and the delivery worker process every other row, and
park the bad one with a log line and a counter.
"""

from __future__ import annotations

import json
import logging
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import cast, func, literal, select, update
from sqlalchemy.dialects.postgresql import JSONB

from signoff.context import AppContext
from signoff.models import ApprovalRequest
from signoff.models.webhooks import WebhookDelivery
from signoff.wiring import Wiring
from signoff.worker.sweeper import sweep_expired_once
from tests.conftest import Org, create_approval
from tests.helpers import NO_SWEEP, CallbackReceiver, backdate_expiry, stored_request

# Deeper than orjson encodes (255): a callback body can never be built for it.
UNENCODABLE_DEPTH = 300


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    return NO_SWEEP


def _nested(depth: int) -> str:
    value: Any = "bottom"
    for _ in range(depth):
        value = {"next": value}
    return json.dumps(value)


async def plant_unencodable_metadata(ctx: AppContext, request_id: str) -> None:
    """Write metadata no release of signoff accepts today, bypassing every validator."""
    text = literal(_nested(UNENCODABLE_DEPTH))
    stored = cast(text, JSONB) if ctx.db.dialect == "postgresql" else func.json(text)
    async with ctx.transaction() as uow:
        await uow.session.execute(
            update(ApprovalRequest)
            .where(ApprovalRequest.id == uuid.UUID(request_id))
            .values(metadata_=stored)
        )


async def _deliveries_of(ctx: AppContext, request_id: str) -> list[WebhookDelivery]:
    async with ctx.reading() as uow:
        rows = await uow.session.scalars(
            select(WebhookDelivery).where(WebhookDelivery.request_id == uuid.UUID(request_id))
        )
        return list(rows)


async def test_the_sweep_expires_every_other_request_and_parks_the_bad_one(
    api_only: httpx.AsyncClient,
    org: Org,
    other_org: Org,
    ctx: AppContext,
    wiring: Wiring,
    caplog: pytest.LogCaptureFixture,
) -> None:
    hour = datetime.now(UTC) + timedelta(hours=1)
    async with CallbackReceiver() as receiver:
        expires = {"expires_at": hour.isoformat(), "callback_url": receiver.url}
        bad = await create_approval(api_only, org.member, **expires)
        good = [await create_approval(api_only, org.member, **expires) for _ in range(3)]
        good.append(await create_approval(api_only, other_org.member, **expires))
        await plant_unencodable_metadata(ctx, bad["id"])
        # The bad one falls due first, so it heads the sweep's batch.
        await backdate_expiry(ctx, bad["id"], ago=timedelta(seconds=10))
        for request in good:
            await backdate_expiry(ctx, request["id"])

        with caplog.at_level(logging.ERROR, logger="signoff.poison"):
            assert await sweep_expired_once(ctx, wiring.poisoned) == 5
        for request in good:
            assert (await stored_request(ctx, request["id"])).status == "expired"
            assert len(await _deliveries_of(ctx, request["id"])) == 1
        assert (await stored_request(ctx, bad["id"])).status == "pending"
        assert await _deliveries_of(ctx, bad["id"]) == []
        assert wiring.poisoned.counts["expiry"] == 1
        assert any(bad["id"] in record.getMessage() for record in caplog.records)

        # Parked: the next sweeps leave it out instead of failing on it every second.
        assert await sweep_expired_once(ctx, wiring.poisoned) == 0
        assert wiring.poisoned.counts["expiry"] == 1


async def test_emergency_stop_cancels_the_rest_when_one_request_cannot_be_cancelled(
    client: httpx.AsyncClient, org: Org, ctx: AppContext, wiring: Wiring
) -> None:
    async with CallbackReceiver() as receiver:
        bad = await create_approval(client, org.member, callback_url=receiver.url)
        good = [
            await create_approval(client, org.member, callback_url=receiver.url) for _ in range(4)
        ]
        await plant_unencodable_metadata(ctx, bad["id"])
        response = await client.put(
            "/api/v1/emergency-stop",
            headers=org.admin.headers,
            json={"active": True, "cancel_pending": True},
        )
        assert response.status_code == 200, response.text
        assert response.json()["cancelled"] == 4
        for request in good:
            assert (await stored_request(ctx, request["id"])).status == "cancelled"
            assert len(await _deliveries_of(ctx, request["id"])) == 1
        assert (await stored_request(ctx, bad["id"])).status == "pending"
        assert wiring.poisoned.counts["emergency_stop"] == 1


async def test_a_delivery_that_cannot_be_signed_fails_alone(
    client: httpx.AsyncClient, org: Org, ctx: AppContext, wiring: Wiring
) -> None:
    async with CallbackReceiver() as receiver:
        headers = {"X-Team": "billing"}
        bad = await create_approval(
            client, org.member, callback_url=receiver.url, callback_headers=headers
        )
        good = await create_approval(
            client, org.member, callback_url=receiver.url, callback_headers=headers
        )
        async with ctx.transaction() as uow:
            await uow.session.execute(
                update(ApprovalRequest)
                .where(ApprovalRequest.id == uuid.UUID(bad["id"]))
                .values(callback_headers_encrypted="not-a-ciphertext")
            )
        decided = await client.patch(
            f"/api/v1/approvals/{bad['id']}",
            headers=org.admin.headers,
            json={"decision": "approve"},
        )
        assert decided.status_code == 200, decided.text
        assert decided.json()["callback_delivered"] is False
        [delivery] = await _deliveries_of(ctx, bad["id"])
        log = await client.get(
            "/api/v1/webhooks", params={"request_id": bad["id"]}, headers=org.admin.headers
        )
        assert log.json()["data"][0]["error"] == "signing failed"
        assert wiring.poisoned.counts["delivery"] == 1

        other = await client.patch(
            f"/api/v1/approvals/{good['id']}",
            headers=org.admin.headers,
            json={"decision": "approve"},
        )
        assert other.json()["callback_delivered"] is True
        assert len(receiver.bodies) == 1
        assert json.loads(receiver.bodies[0])["request_id"] == good["id"]
        assert delivery.status == "pending"  # retried on its schedule, then failed
