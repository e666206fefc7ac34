"""A budget and a standing approval's uses hold across processes: two ``signoff serve``
processes on one database (a SQLite file, or PostgreSQL), each with its own connections
and cache of compiled documents, take creates at once; exactly the budget is approved,
and exactly the standing approval's uses."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from bench.receiver import free_port

from signoff.context import AppContext
from tests.app.test_shutdown import _env, _until, signoff
from tests.conftest import Member, Org, create_approval, create_org

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def two_servers(database_url: str, tmp_path: Path) -> AsyncIterator[list[httpx.AsyncClient]]:
    """Two serving processes on ``database_url``, ready, with a client for each."""
    env = _env(database_url)
    async with AsyncExitStack() as stack:
        clients = []
        for index in range(2):
            port, log = free_port(), tmp_path / f"serve-{index}.log"
            await stack.enter_async_context(signoff(log, "serve", "--port", str(port), env=env))
            http = await stack.enter_async_context(
                httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=60)
            )

            async def ready(http: httpx.AsyncClient = http) -> bool:
                try:
                    return (await http.get("/readyz")).status_code == 200
                except httpx.TransportError:
                    return False

            await _until(ready, f"signoff serve {index} ready:\n{log.read_text()}", timeout=60)
            clients.append(http)
        yield clients


async def _creates(
    servers: list[httpx.AsyncClient], members: list[Member], count: int, **body: Any
) -> list[str]:
    """``count`` creates at once, alternating between the servers and the members."""
    answers = await asyncio.gather(
        *(create_approval(servers[i % 2], members[i % len(members)], **body) for i in range(count))
    )
    return [answer["status"] for answer in answers]


async def test_two_processes_spend_one_budget(
    client: httpx.AsyncClient, ctx: AppContext, database_url: str, tmp_path: Path
) -> None:
    org: Org = await create_org(ctx, "Budget", members=3)
    budget = {"per": "hour", "scope": "org", "max_count": 10}
    document = {
        "rules": [
            {
                "name": "deploys",
                "condition": 'request.action_type == "deploy"',
                "effect": "auto_approve",
                "budget": budget,
            }
        ]
    }
    saved = await client.put("/api/v1/policies", json=document, headers=org.admin.headers)
    assert saved.status_code == 200, saved.text
    async with two_servers(database_url, tmp_path) as servers:
        statuses = await _creates(servers, [org.admin, *org.members], 50, action_type="deploy")
    assert statuses.count("approved") == 10 and statuses.count("pending") == 40, statuses


async def test_two_processes_take_a_standing_approvals_uses_once_each(
    client: httpx.AsyncClient, ctx: AppContext, database_url: str, tmp_path: Path
) -> None:
    org: Org = await create_org(ctx, "Standing", members=2)
    first = await create_approval(client, org.member, action_type="restart")
    granted = await client.patch(
        f"/api/v1/approvals/{first['id']}",
        json={"decision": "approve", "standing": {"ttl_seconds": 3600, "max_uses": 5}},
        headers=org.admin.headers,
    )
    assert granted.status_code == 200, granted.text
    async with two_servers(database_url, tmp_path) as servers:
        statuses = await _creates(servers, [org.member], 20, action_type="restart")
    assert statuses.count("approved") == 5 and statuses.count("pending") == 15, statuses
