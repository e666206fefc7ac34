"""``AsyncSignoffClient``: the same methods as the blocking client, awaited."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator

import httpx
import pytest

from conftest import LiveServer
from signoff_client import (
    AlreadyVoted,
    AsyncSignoffClient,
    NotFound,
    RequestNotPending,
    ValidationError,
    WaitTimeout,
)

pytestmark = pytest.mark.anyio


@pytest.fixture
async def admin_async(live: LiveServer) -> AsyncIterator[AsyncSignoffClient]:
    async with AsyncSignoffClient(live.base_url, live.admin.api_key) as client:
        yield client


@pytest.fixture
async def member_async(live: LiveServer) -> AsyncIterator[AsyncSignoffClient]:
    async with AsyncSignoffClient(live.base_url, live.member.api_key) as client:
        yield client


async def test_every_method(
    live: LiveServer,
    admin_async: AsyncSignoffClient,
    member_async: AsyncSignoffClient,
    tag: str,
) -> None:
    created = await admin_async.create_approval(
        "Async deploy", "d", "high", source=tag, metadata={"n": 1}, idempotency_key=True
    )
    assert created.status == "pending"
    assert (await admin_async.get_approval(created.id)).metadata == {"n": 1}
    comment = await member_async.add_comment(created.id, "looks fine")
    assert [c.id for c in await admin_async.list_comments(created.id)] == [comment.id]

    chained = await admin_async.create_approval("Chain", "d", "low", source=tag)
    steps = await admin_async.set_steps(chained.id, [live.member.user_id], False)
    assert [s.id for s in await admin_async.list_steps(chained.id)] == [steps[0].id]
    vote = await member_async.vote_step(chained.id, steps[0].id, "approve", "ok")
    assert vote.request_status == "approved"

    others = [await admin_async.create_approval(f"n{i}", "d", "low", source=tag) for i in range(3)]
    listed = [a.id async for a in admin_async.list_approvals(source=tag, page_size=2)]
    assert listed == [a.id for a in reversed([created, chained, *others])]

    cancelled = await admin_async.cancel(others[0].id)
    assert cancelled.status == "cancelled"
    decided = await member_async.decide(created.id, "approve", "go")
    assert (decided.status, decided.decision_comment) == ("approved", "go")
    types = [e.type for e in await admin_async.list_events(created.id)]
    assert types[0] == "request.created" and "request.approved" in types


async def test_errors_are_typed(
    admin_async: AsyncSignoffClient, member_async: AsyncSignoffClient
) -> None:
    with pytest.raises(NotFound):
        await admin_async.get_approval(str(uuid.uuid4()))
    with pytest.raises(ValidationError) as invalid:
        await admin_async.create_approval("t", "", "low")
    assert [f["field"] for f in invalid.value.fields] == ["description"]
    two = await admin_async.create_approval("t", "d", "low", required_approvals=2)
    await member_async.decide(two.id, "approve")
    with pytest.raises(AlreadyVoted):
        await member_async.decide(two.id, "approve")
    await admin_async.cancel(two.id)
    with pytest.raises(RequestNotPending):
        await admin_async.decide(two.id, "approve")


async def holds_a_long_poll(http: httpx.AsyncClient) -> bool:
    return "signoff_long_polls_waiting 1.0" in (await http.get("/metrics")).text


async def test_wait_for_a_decision_made_meanwhile(
    live: LiveServer, admin_async: AsyncSignoffClient, member_async: AsyncSignoffClient
) -> None:
    created = await admin_async.create_approval("Wait for me", "d", "high")

    async def human() -> None:
        # Decides while the client waits: once the server holds its long poll.
        async with httpx.AsyncClient(base_url=live.base_url) as http, asyncio.timeout(10):
            # Another process's gauge: nothing here to await but a new look.
            while not await holds_a_long_poll(http):  # noqa: ASYNC110
                await asyncio.sleep(0.01)
        await member_async.decide(created.id, "approve")

    started = time.monotonic()
    decided, _ = await asyncio.gather(admin_async.wait_for_decision(created.id, 30), human())
    assert decided.status == "approved"
    assert time.monotonic() - started < 10

    pending = await admin_async.create_approval("Nobody", "d", "low")
    with pytest.raises(WaitTimeout):
        await admin_async.wait_for_decision(pending.id, timeout=1)
