"""A budget holds across replicas: two apps, each with its own pool and its own cache of
compiled documents, share one PostgreSQL database; 50 creates split between them against
a budget of 10 approve exactly 10."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

from signoff.app import create_app
from signoff.config import Settings
from signoff.wiring import Wiring
from tests.conftest import Org, create_approval

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("postgres_only")]


@asynccontextmanager
async def replica(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    wiring = Wiring.from_settings(settings)
    app = create_app(settings, wiring=wiring, background=False)
    try:
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://r") as client:
                yield client
    finally:
        await wiring.close()


async def test_two_replicas_spend_one_budget(
    client: httpx.AsyncClient, org: Org, settings: Settings
) -> None:
    budget = {"per": "hour", "scope": "org", "max_count": 10}
    document: dict[str, Any] = {
        "rules": [
            {"name": "deploys", "condition": "true", "effect": "auto_approve", "budget": budget}
        ]
    }
    saved = await client.put("/api/v1/policies", json=document, headers=org.admin.headers)
    assert saved.status_code == 200, saved.text
    members = [org.admin, *org.members]
    # The fixture's app is one replica, a second app the other (each app holds pools of
    # its own, and the test server's connections are shared with other suites).
    async with replica(settings) as two:
        one = client
        created = await asyncio.gather(
            *(create_approval((one, two)[i % 2], members[i % len(members)]) for i in range(50))
        )
    statuses = [c["status"] for c in created]
    assert statuses.count("approved") == 10 and statuses.count("pending") == 40
