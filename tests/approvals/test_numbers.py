"""Each request's number in its org (``#1234``): given at create, 1, 2, 3 ... per org,
never shared by two requests of an org, whoever creates them at once (concurrent calls,
two processes on PostgreSQL), never reused, and found by a search for it."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from signoff.context import AppContext
from tests.conftest import Org, approval_body, create_approval, create_org

REPO = Path(__file__).resolve().parents[2]


async def _numbers(client: httpx.AsyncClient, who: Any) -> list[int]:
    response = await client.get("/api/v1/approvals?page_size=100", headers=who.headers)
    assert response.status_code == 200, response.text
    return sorted(item["number"] for item in response.json()["data"])


async def test_numbers_count_up_in_each_org_on_their_own(
    client: httpx.AsyncClient, org: Org, other_org: Org
) -> None:
    ours = [await create_approval(client, org.member, title=f"Ours {i}") for i in range(4)]
    theirs = [await create_approval(client, other_org.member) for _ in range(2)]
    ours.append(await create_approval(client, org.admin, title="Ours 4"))

    assert [request["number"] for request in ours] == [1, 2, 3, 4, 5]
    assert [request["number"] for request in theirs] == [1, 2]
    # Every representation carries the number given at create.
    for request in ours:
        url = f"/api/v1/approvals/{request['id']}"
        read = (await client.get(url, headers=org.admin.headers)).json()
        assert read["number"] == request["number"]
    assert await _numbers(client, org.member) == [1, 2, 3, 4, 5]
    assert await _numbers(client, other_org.member) == [1, 2]


async def test_creates_at_once_get_different_numbers(
    client: httpx.AsyncClient, org: Org, other_org: Org
) -> None:
    """Concurrent creates in one org (and another org's at the same time): no number is
    given twice, and with no create failing none is skipped."""
    calls = [
        create_approval(client, org.members[i % 3], title=f"At once {i}") for i in range(24)
    ] + [create_approval(client, other_org.member, title=f"Theirs {i}") for i in range(6)]
    created = await asyncio.gather(*calls)
    assert sorted(request["number"] for request in created[:24]) == list(range(1, 25))
    assert sorted(request["number"] for request in created[24:]) == list(range(1, 7))


async def test_a_replay_takes_no_number(client: httpx.AsyncClient, org: Org) -> None:
    first = await create_approval(client, org.member, idempotency_key="deploy-42")
    replay = await client.post(
        "/api/v1/approvals",
        json=approval_body(idempotency_key="deploy-42"),
        headers=org.member.headers,
    )
    assert replay.status_code == 200 and replay.json()["number"] == first["number"] == 1
    assert (await create_approval(client, org.member))["number"] == 2


async def test_numbers_are_not_reused_after_requests_are_deleted(
    client: httpx.AsyncClient, ctx: AppContext, org: Org
) -> None:
    """A retention purge deletes an org's oldest requests, all of them in a quiet org:
    the next request still gets a number of its own."""
    for _ in range(3):
        await create_approval(client, org.member)
    async with ctx.transaction() as uow:
        await uow.session.execute(text("DELETE FROM approval_requests"))
    assert (await create_approval(client, org.member))["number"] == 4


async def test_search_finds_a_request_by_its_number(
    client: httpx.AsyncClient, org: Org, other_org: Org
) -> None:
    for i in range(12):
        await create_approval(client, org.member, title=f"Rotate key {i}")
    await create_approval(client, other_org.member, title="Theirs")  # their #1

    async def found(search: str, who: Any = org.member) -> list[tuple[int, str]]:
        response = await client.get(
            "/api/v1/approvals", params={"search": search}, headers=who.headers
        )
        assert response.status_code == 200, response.text
        return [(item["number"], item["title"]) for item in response.json()["data"]]

    assert await found("#12") == [(12, "Rotate key 11")]
    assert await found("12") == [(12, "Rotate key 11")]
    assert await found(" #3 ") == [(3, "Rotate key 2")]
    assert await found("#1", other_org.member) == [(1, "Theirs")]
    assert await found("#99") == []
    # Words still search the text: a number inside a title is found by the words around it.
    assert [number for number, _ in await found("rotate key")] != []


@pytest.mark.usefixtures("postgres_only")
async def test_an_orgs_first_creates_at_once_share_one_sequence(
    client: httpx.AsyncClient, org: Org
) -> None:
    """PostgreSQL: the org's sequence is made by its first create; creates racing to make
    it wait for the first and draw from its sequence."""
    created = await asyncio.gather(
        *(create_approval(client, org.members[i % 3], title=f"First {i}") for i in range(16))
    )
    assert sorted(request["number"] for request in created) == list(range(1, 17))


@pytest.mark.usefixtures("postgres_only")
async def test_deleting_an_org_drops_its_sequence(
    client: httpx.AsyncClient, ctx: AppContext, org: Org
) -> None:
    await create_approval(client, org.member)
    name = f"signoff_request_number_{uuid.UUID(org.id).hex}"

    async def sequence_exists() -> bool:
        async with ctx.transaction() as uow:
            found = await uow.session.execute(text("SELECT to_regclass(:n)"), {"n": name})
            return found.scalar() is not None

    assert await sequence_exists()
    async with ctx.transaction() as uow:
        for table in ("audit_events", "notification_plans", "approval_requests"):
            await uow.session.execute(text(f"DELETE FROM {table}"))
        await uow.session.execute(text("DELETE FROM connections"))
        await uow.session.execute(text("DELETE FROM users"))
        await uow.session.execute(text("DELETE FROM organizations"))
    assert not await sequence_exists()


_CREATOR = """
import asyncio, json, sys
import httpx
from signoff.app import create_app
from signoff.wiring import Wiring
from tests.conftest import approval_body, make_settings

async def main(url, key, count):
    wiring = Wiring.from_settings(make_settings(url))
    app = create_app(wiring.ctx.settings, wiring=wiring, background=False)
    numbers = []
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://signoff.test") as c:
            async def create(i):
                r = await c.post("/api/v1/approvals", headers={"Authorization": f"Bearer {key}"},
                                 json=approval_body(title=f"from {sys.argv[4]} {i}"))
                assert r.status_code == 201, r.text
                numbers.append(r.json()["number"])
            await asyncio.gather(*(create(i) for i in range(count)))
    await wiring.close()
    print(json.dumps(numbers))

asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
"""


@pytest.mark.usefixtures("postgres_only")
async def test_two_processes_never_give_one_number_twice(
    ctx: AppContext, database_url: str
) -> None:
    """Two server processes on one PostgreSQL database, creating in one org at once: no
    process keeps numbers of its own, so none is given twice."""
    org = await create_org(ctx, "Initech", members=2)
    count = 40

    def run(member_index: int) -> subprocess.Popen[str]:
        key = org.members[member_index].api_key
        arguments = [database_url, key, str(count), f"p{member_index}"]
        return subprocess.Popen(
            [sys.executable, "-c", _CREATOR, *arguments],
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            stdout=subprocess.PIPE,
            text=True,
        )

    processes = [run(0), run(1)]
    outputs = [await asyncio.to_thread(p.communicate, timeout=120) for p in processes]
    assert [p.returncode for p in processes] == [0, 0]
    numbers = [n for out, _ in outputs for n in json.loads(out.strip().splitlines()[-1])]
    assert sorted(numbers) == list(range(1, 2 * count + 1))
