"""PostgreSQL: a chain's first configuration and its step votes are made without a lock,
as decisions are (``service._without_lock``): the request and its chain read in
autocommit, every write in one statement of its own, made only if the request is still
the version read. Those statements run on the hot path's connections, whose triggers stay
silent (migration 0019): the process tells the others after the commit, and they must
still hear every change."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select

from signoff.approvals.repository import ApprovalRepository
from signoff.config import Settings
from signoff.context import AppContext
from signoff.models import Vote
from signoff.notifications.planning.repository import NOTIFY_CHANNEL as PLAN_CHANNEL
from signoff.storage import REQUEST_CHANNEL, Notifier
from signoff.wiring import Wiring
from tests.conftest import Org, create_approval, eventually
from tests.notifications.support import CHANNEL_MATCHING_NOTHING
from tests.steps.test_steps import set_chain, vote
from tests.storage.listen import heard

# SQLite's writers hold the database: every vote takes the lock.
pytestmark = pytest.mark.usefixtures("postgres_only")


def sent_by_the_process(ctx: AppContext, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The channels of the triggers (request status, notification plans) the process's
    ``Notifier`` is asked to notify, in order; the dashboard's are left out."""
    assert ctx.notifier is not None
    channels: list[str] = []
    send = Notifier.send

    def recorded(self: Notifier, channel: str, payload: str = "") -> None:
        if channel in (REQUEST_CHANNEL, PLAN_CHANNEL):
            channels.append(channel)
        send(self, channel, payload)

    monkeypatch.setattr(Notifier, "send", recorded)
    return channels


async def test_a_chain_is_heard_by_other_processes_each_step_of_the_way(
    settings: Settings,
    org: Org,
    client: httpx.AsyncClient,
    ctx: AppContext,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # An org that can notify: its opened steps write plan rows (those of others write none).
    routed = await client.put(
        "/api/v1/routing", json=CHANNEL_MATCHING_NOTHING, headers=org.admin.headers
    )
    assert routed.status_code == 200, routed.text
    request = await create_approval(client, org.admin, is_sequential=True)
    first, second = org.members[0], org.members[1]
    told = sent_by_the_process(ctx, monkeypatch)
    async with (
        heard(settings, PLAN_CHANNEL) as planned,
        heard(settings, REQUEST_CHANNEL) as changed,
    ):
        steps = await set_chain(client, org.admin, request["id"], [first, second])
        # The first step opens: another process's notification sender wakes.
        await eventually(lambda: len(planned) >= 1, "the configuration's plan notification")
        # Sent by the process after the commit: the write itself did not notify. The
        # request is still pending: no long poll has anything to answer yet.
        assert told == [PLAN_CHANNEL]
        told.clear()

        opened = await vote(client, first, request["id"], steps[0]["id"])
        assert opened.json()["request_status"] == "pending", opened.text
        await eventually(lambda: len(planned) >= 2, "the next step's plan notification")
        assert told == [PLAN_CHANNEL]
        told.clear()

        final = await vote(client, second, request["id"], steps[1]["id"])
        assert final.json()["request_status"] == "approved", final.text
        # What wakes another replica's long poll on the request: the first and only
        # notification of it, as 0011's trigger sends one only when the status changes.
        await eventually(lambda: request["id"] in changed, "the final vote's notification")
        assert told == [REQUEST_CHANNEL]
        assert changed == [request["id"]]


async def test_a_long_poll_of_another_process_wakes_on_the_last_vote(
    settings: Settings, org: Org, client: httpx.AsyncClient
) -> None:
    request = await create_approval(client, org.admin, is_sequential=True)
    steps = await set_chain(client, org.admin, request["id"], [org.member])
    rid = uuid.UUID(request["id"])
    other = Wiring.from_settings(settings)  # another replica: its own listener
    try:
        with other.waiters.watch(rid) as woken:
            # The listener's (re)connection wakes every watcher once: wait for that first.
            await asyncio.wait_for(woken.wait(), 10)
            woken.clear()
            answer = await vote(client, org.member, request["id"], steps[0]["id"])
            assert answer.json()["request_status"] == "approved", answer.text
            await asyncio.wait_for(woken.wait(), 10)
    finally:
        await other.close()


async def test_a_step_vote_that_lost_a_race_reads_again_and_counts_both(
    client: httpx.AsyncClient, org: Org, ctx: AppContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    request = await create_approval(client, org.admin)  # a parallel chain
    first, second = org.members[0], org.members[1]
    steps = await set_chain(client, org.admin, request["id"], [first, second])
    read_versioned = ApprovalRepository.read_versioned
    reads = 0

    async def another_vote_lands_after_the_first_read(
        self: ApprovalRepository, *args: Any, **kwargs: Any
    ) -> Any:
        nonlocal reads
        reads += 1
        found = await read_versioned(self, *args, **kwargs)
        if reads == 1:  # between this vote's read and its write
            other = await vote(client, second, request["id"], steps[1]["id"])
            assert other.json()["request_status"] == "pending", other.text
        return found

    monkeypatch.setattr(
        ApprovalRepository, "read_versioned", another_vote_lands_after_the_first_read
    )
    answer = await vote(client, first, request["id"], steps[0]["id"])
    assert answer.status_code == 200, answer.text
    assert (answer.json()["request_status"], answer.json()["current_approvals"]) == (
        "approved",
        2,
    )
    # The first read, the other vote's, and this one's second.
    assert reads == 3
    async with ctx.reading() as uow:
        votes = await uow.session.scalar(
            select(func.count())
            .select_from(Vote)
            .where(Vote.request_id == uuid.UUID(request["id"]))
        )
    assert votes == 2


async def test_the_voted_step_is_answered_as_stored(client: httpx.AsyncClient, org: Org) -> None:
    request = await create_approval(client, org.admin, is_sequential=True)
    steps = await set_chain(client, org.admin, request["id"], [org.member, org.members[1]])
    answer = await vote(client, org.member, request["id"], steps[0]["id"], comment="ok")
    assert answer.status_code == 200, answer.text
    listed = await client.get(f"/api/v1/approvals/{request['id']}/steps", headers=org.admin.headers)
    stored = listed.json()["data"][0]
    assert {key: answer.json()[key] for key in stored} == stored
    assert (stored["status"], stored["decided_by"], stored["comment"]) == (
        "approved",
        org.member.user_id,
        "ok",
    )
