"""The measurement switches of the hand-written storage parts (docs/performance.md,
*Hand-written replacements*): each puts the plain path back, and the app answers a
create, a decision, a get and filtered lists the same with it, on both databases."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from signoff.context import AppContext
from signoff.models import ApprovalRequest
from signoff.storage import PreparedQuery, SQLiteIndex, may_write_alone
from signoff.storage.sqlite_driver import ThreadedConnection
from tests.conftest import Org, create_approval, create_org

SWITCHES = [
    "SIGNOFF_STOCK_EXECUTION",
    "SIGNOFF_STOCK_SQLITE_DRIVER",
    "SIGNOFF_STOCK_COMMITS",
    "SIGNOFF_STOCK_WRITES_ALONE",
    "SIGNOFF_STOCK_SQLITE_PLANNER",
]


@pytest.fixture(params=SWITCHES)
def switch(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    name: str = request.param
    monkeypatch.setenv(name, "1")
    return name


@pytest.fixture
def settings_overrides(switch: str) -> dict[str, Any]:
    """The switch is set before the app (and its database) is made."""
    return {}


async def test_the_app_answers_the_same_with_the_switch_set(
    switch: str, client: httpx.AsyncClient, ctx: AppContext
) -> None:
    org = await create_org(ctx, "Switched", members=2)
    created = [
        await create_approval(client, org.admin, title=f"Deploy {n}", priority=priority)
        for n, priority in enumerate(("high", "low", "high"))
    ]
    await _decide(client, org, created[0]["id"], "approve")
    await _decide(client, org, created[1]["id"], "reject")

    got = await client.get(f"/api/v1/approvals/{created[0]['id']}", headers=org.admin.headers)
    assert (got.status_code, got.json()["status"]) == (200, "approved")
    assert await _titles(client, org, {}) == ["Deploy 2", "Deploy 1", "Deploy 0"]
    assert await _titles(client, org, {"status": "approved"}) == ["Deploy 0"]
    assert await _titles(client, org, {"status": "approved,rejected"}) == [
        "Deploy 1",
        "Deploy 0",
    ]
    assert await _titles(client, org, {"priority": "high"}) == ["Deploy 2", "Deploy 0"]
    assert await _titles(client, org, {"status": "pending", "priority": "high"}) == ["Deploy 2"]
    await _assert_switched(switch, ctx)


async def _decide(client: httpx.AsyncClient, org: Org, request_id: str, decision: str) -> None:
    response = await client.patch(
        f"/api/v1/approvals/{request_id}",
        headers=org.members[0].headers,
        json={"decision": decision},
    )
    assert response.status_code == 200, response.text


async def _titles(client: httpx.AsyncClient, org: Org, params: dict[str, str]) -> list[str]:
    response = await client.get("/api/v1/approvals", headers=org.admin.headers, params=params)
    assert response.status_code == 200, response.text
    body = response.json()
    titles = [item["title"] for item in body["data"]]
    assert body["total"] == len(titles)
    return titles


async def _assert_switched(switch: str, ctx: AppContext) -> None:
    """The switch took effect: the plain path is the one that answered."""
    db = ctx.db
    if switch == "SIGNOFF_STOCK_EXECUTION":
        assert not db.queries.is_autocommit and db.queries.through_engine
    elif switch == "SIGNOFF_STOCK_SQLITE_DRIVER" and db.is_sqlite:
        async with db.read_engine.connect() as connection:
            raw = await connection.get_raw_connection()
            assert isinstance(raw.driver_connection, ThreadedConnection)
    elif switch == "SIGNOFF_STOCK_COMMITS" and db.group_commit is not None:
        assert db.group_commit.committed_transactions == db.group_commit.committed_writers
    elif switch == "SIGNOFF_STOCK_WRITES_ALONE" and not db.is_sqlite:
        assert db.queries.is_autocommit
        assert not may_write_alone(AsyncSession(db.write_engine), db.queries)
    elif switch == "SIGNOFF_STOCK_SQLITE_PLANNER":
        hinted = PreparedQuery(
            select(ApprovalRequest.id),
            sqlite_indexes=[SQLiteIndex("approval_requests", "ix_approval_requests_org_created")],
        )
        assert "INDEXED BY" not in hinted.for_sqlite(db.read_engine.dialect).sql
