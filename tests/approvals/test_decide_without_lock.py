"""Decisions racing on one request, and PostgreSQL's decision without a lock: read, ask
the state machine, write everything in one statement made only if the request is still
the version read; a lost race writes nothing and is read again."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select

from signoff.approvals import service
from signoff.approvals.repository import ApprovalRepository
from signoff.context import AppContext
from signoff.models import AuditEvent, Vote
from tests.conftest import Org, assert_error, create_approval, create_org


async def stored(ctx: AppContext, request_id: str) -> tuple[int, list[str]]:
    """The request's votes, and the types of its audit events in order."""
    rid = uuid.UUID(request_id)
    async with ctx.reading() as uow:
        votes = await uow.session.scalar(
            select(func.count()).select_from(Vote).where(Vote.request_id == rid)
        )
        events = await uow.session.scalars(
            select(AuditEvent.type)
            .where(AuditEvent.request_id == rid)
            .order_by(AuditEvent.created_at, AuditEvent.id)
        )
        return int(votes or 0), list(events)


async def test_many_approvals_at_once_count_exactly_to_the_bar(
    client: httpx.AsyncClient, ctx: AppContext
) -> None:
    crowd = await create_org(ctx, "Crowd", members=8)
    request = await create_approval(client, crowd.admin, required_approvals=3)
    url = f"/api/v1/approvals/{request['id']}"
    responses = await asyncio.gather(
        *(client.patch(url, headers=m.headers, json={"decision": "approve"}) for m in crowd.members)
    )
    answered = sorted(r.status_code for r in responses)
    assert answered == [200] * 3 + [409] * 5
    for refused in (r for r in responses if r.status_code == 409):
        assert_error(refused, 409, "REQUEST_NOT_PENDING")
    statuses = sorted(r.json()["status"] for r in responses if r.status_code == 200)
    assert statuses == ["approved", "pending", "pending"]
    final = (await client.get(url, headers=crowd.admin.headers)).json()
    assert (final["status"], final["current_approvals"]) == ("approved", 3)
    votes, events = await stored(ctx, request["id"])
    assert votes == 3
    # Each event is dated by its call's start, whichever wrote first.
    assert sorted(events) == [
        "request.approved",
        "request.created",
        "request.vote_recorded",
        "request.vote_recorded",
    ]


async def test_an_approval_and_a_rejection_at_once_one_wins(
    client: httpx.AsyncClient, org: Org, ctx: AppContext
) -> None:
    for _ in range(5):
        request = await create_approval(client, org.admin)
        url = f"/api/v1/approvals/{request['id']}"
        approve, reject = await asyncio.gather(
            client.patch(url, headers=org.members[0].headers, json={"decision": "approve"}),
            client.patch(url, headers=org.members[1].headers, json={"decision": "reject"}),
        )
        assert sorted((approve.status_code, reject.status_code)) == [200, 409]
        winner = approve if approve.status_code == 200 else reject
        final = (await client.get(url, headers=org.admin.headers)).json()
        assert final["status"] == winner.json()["status"]
        votes, events = await stored(ctx, request["id"])
        assert votes == 1
        assert events == ["request.created", f"request.{final['status']}"]


async def test_the_same_person_twice_at_once_votes_once(
    client: httpx.AsyncClient, org: Org, ctx: AppContext
) -> None:
    request = await create_approval(client, org.admin, required_approvals=2)
    url = f"/api/v1/approvals/{request['id']}"
    first, second = await asyncio.gather(
        *(
            client.patch(url, headers=org.member.headers, json={"decision": "approve"})
            for _ in range(2)
        )
    )
    assert sorted((first.status_code, second.status_code)) == [200, 409]
    refused = first if first.status_code == 409 else second
    assert_error(refused, 409, "ALREADY_VOTED")
    votes, _ = await stored(ctx, request["id"])
    assert votes == 1


# The decisions without a lock below are PostgreSQL's: on SQLite the writers hold the
# database, and every decision takes the lock.
@pytest.mark.usefixtures("postgres_only")
async def test_a_decision_that_lost_a_race_reads_again_and_counts_the_winner(
    client: httpx.AsyncClient, org: Org, ctx: AppContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    request = await create_approval(client, org.admin, required_approvals=2)
    url = f"/api/v1/approvals/{request['id']}"
    read_versioned = ApprovalRepository.read_versioned
    reads = 0

    async def another_decision_lands_after_the_first_read(
        self: ApprovalRepository, *args: Any, **kwargs: Any
    ) -> Any:
        nonlocal reads
        reads += 1
        found = await read_versioned(self, *args, **kwargs)
        if reads == 1:  # between this decision's read and its write
            other = await client.patch(
                url, headers=org.members[1].headers, json={"decision": "approve"}
            )
            assert other.json()["status"] == "pending"
        return found

    monkeypatch.setattr(
        ApprovalRepository, "read_versioned", another_decision_lands_after_the_first_read
    )
    response = await client.patch(url, headers=org.members[0].headers, json={"decision": "approve"})
    assert response.status_code == 200
    assert (response.json()["status"], response.json()["current_approvals"]) == ("approved", 2)
    # The first read, the other decision's, and this one's second.
    assert reads == 3
    votes, events = await stored(ctx, request["id"])
    assert votes == 2
    # Each event is dated by its call's start: this one's came first.
    assert sorted(events) == ["request.approved", "request.created", "request.vote_recorded"]


@pytest.mark.usefixtures("postgres_only")
async def test_races_lost_every_time_write_nothing_and_the_lock_decides(
    client: httpx.AsyncClient, org: Org, ctx: AppContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    request = await create_approval(client, org.admin)
    read_versioned = ApprovalRepository.read_versioned
    reads = 0

    async def a_version_never_current(self: ApprovalRepository, *args: Any, **kwargs: Any) -> Any:
        nonlocal reads
        reads += 1
        found = await read_versioned(self, *args, **kwargs)
        return None if found is None else (found[0], "0", found[2])

    monkeypatch.setattr(ApprovalRepository, "read_versioned", a_version_never_current)
    url = f"/api/v1/approvals/{request['id']}"
    response = await client.patch(url, headers=org.member.headers, json={"decision": "approve"})
    assert response.status_code == 200
    assert response.json()["status"] == "approved"
    assert reads == service.UNLOCKED_ATTEMPTS
    # Each refused statement held a vote, an event and the compare-and-set: none is left.
    votes, events = await stored(ctx, request["id"])
    assert votes == 1
    assert events == ["request.created", "request.approved"]


@pytest.mark.usefixtures("postgres_only")
async def test_a_decision_is_two_round_trips_and_never_begins_a_transaction(
    client: httpx.AsyncClient, org: Org, monkeypatch: pytest.MonkeyPatch
) -> None:
    request = await create_approval(client, org.admin)
    url = f"/api/v1/approvals/{request['id']}"
    locked = ApprovalRepository.get_locked
    locks = 0

    async def counting(self: ApprovalRepository, *args: Any, **kwargs: Any) -> Any:
        nonlocal locks
        locks += 1
        return await locked(self, *args, **kwargs)

    monkeypatch.setattr(ApprovalRepository, "get_locked", counting)
    response = await client.patch(url, headers=org.member.headers, json={"decision": "approve"})
    assert response.json()["status"] == "approved"
    assert locks == 0
    # A decision with a comment writes through the session: it takes the lock.
    other = await create_approval(client, org.admin)
    commented = await client.patch(
        f"/api/v1/approvals/{other['id']}",
        headers=org.member.headers,
        json={"decision": "reject", "comment": "not now"},
    )
    assert commented.json()["status"] == "rejected"
    assert locks == 1
