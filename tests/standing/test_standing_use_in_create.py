"""PostgreSQL: a standing-approval hit's use is taken by the create's own statement, not
by an UPDATE of its own (issue 36: a hit as fast as a plain create). The lookup and
the create are a hit's two statements, as they are a plain create's in an org that
granted one; a use lost to others between them writes nothing, and the create then
matches again, each use an UPDATE of its own (``StandingUseLost``)."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select, update

from signoff.context import AppContext
from signoff.models import ApprovalRequest, StandingApproval
from signoff.policies import standing_repository
from signoff.policies.standing_repository import StandingApprovalRepository
from tests.conftest import Org
from tests.standing.support import grant, request, standing_list

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("postgres_only")]


@pytest.fixture
def uses_alone(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The standing repository's use statements made on their own (``_USE``)."""
    made: list[Any] = []
    real = standing_repository.execute_in

    async def counted(session: Any, query: Any, params: Any) -> Any:
        if query is standing_repository._USE:
            made.append(params)
        return await real(session, query, params)

    monkeypatch.setattr(standing_repository, "execute_in", counted)
    return made


async def spend(ctx: AppContext, standing_id: str) -> None:
    """Others spend the standing approval's one use, in a transaction of their own."""
    async with ctx.transaction() as uow:
        await uow.session.execute(
            update(StandingApproval)
            .where(StandingApproval.id == uuid.UUID(standing_id))
            .values(uses=1)
        )


async def fresh_principal(client: httpx.AsyncClient, org: Org) -> None:
    """A create no standing approval matches: the requester's principal, stale since the
    grant, is read again (else the next create starts over once, ``StalePrincipal``,
    and its first try's lookup is not the one that counts)."""
    assert (await request(client, org.members[0], action_type="other.kind"))["status"] == "pending"


async def test_a_hit_takes_its_use_in_the_create_statement(
    client: httpx.AsyncClient, org: Org, uses_alone: list[Any]
) -> None:
    requester, approver = org.members[0], org.members[1]
    standing_id = await grant(client, requester, approver, {"max_uses": 2})
    first = await request(client, requester)
    second = await request(client, requester)
    third = await request(client, requester)
    assert [first["status"], second["status"], third["status"]] == [
        "approved",
        "approved",
        "pending",
    ]
    assert first["standing_approval_id"] == standing_id
    assert uses_alone == []
    assert await standing_list(client, approver) == []  # two uses, both taken
    events = await client.get(f"/api/v1/approvals/{second['id']}/events", headers=approver.headers)
    (approved,) = [e for e in events.json()["data"] if e["type"] == "request.approved"]
    assert approved["data"]["standing_approval"]["uses"] == 2


async def test_a_use_lost_before_the_create_writes_nothing_and_matches_again(
    client: httpx.AsyncClient,
    ctx: AppContext,
    org: Org,
    monkeypatch: pytest.MonkeyPatch,
    uses_alone: list[Any],
) -> None:
    """Between the lookup and the create, others spend the last use: the create's
    statement inserts nothing, the create reads again and goes to people; the uses
    stay at max_uses, and the request is written once."""
    requester, approver = org.members[0], org.members[1]
    standing_id = await grant(client, requester, approver, {"max_uses": 1})
    await fresh_principal(client, org)
    real = StandingApprovalRepository.candidates
    spent: list[bool] = []

    async def spent_meanwhile(self: StandingApprovalRepository, *args: Any) -> Any:
        found = await real(self, *args)
        if not spent:
            spent.append(True)
            await spend(ctx, standing_id)
        return found

    monkeypatch.setattr(StandingApprovalRepository, "candidates", spent_meanwhile)
    created = await request(client, requester, title="lost its use")
    assert created["status"] == "pending"
    assert created["standing_approval_id"] is None
    assert uses_alone == []  # read again: nothing live is left to take a use of
    async with ctx.reading() as uow:
        uses = await uow.session.scalar(
            select(StandingApproval.uses).where(StandingApproval.id == uuid.UUID(standing_id))
        )
        written = await uow.session.scalar(
            select(func.count()).where(ApprovalRequest.title == "lost its use")
        )
    assert (uses, written) == (1, 1)


async def test_a_use_lost_goes_to_the_next_standing_approval(
    client: httpx.AsyncClient,
    ctx: AppContext,
    org: Org,
    monkeypatch: pytest.MonkeyPatch,
    uses_alone: list[Any],
) -> None:
    requester, approver = org.members[0], org.members[1]
    first_id = await grant(
        client, requester, approver, {"max_uses": 1, "arguments": {"replicas": {"max": 5}}}
    )
    # Granted on a request the first does not approve (9 replicas), later: the second.
    second_id = await grant(
        client,
        requester,
        approver,
        {"max_uses": 1, "arguments": {"replicas": {"max": 10}}},
        arguments={"env": "staging", "replicas": 9},
    )
    await fresh_principal(client, org)
    real = StandingApprovalRepository.candidates

    async def first_spent_meanwhile(self: StandingApprovalRepository, *args: Any) -> Any:
        found = await real(self, *args)
        if len(found) == 2:
            await spend(ctx, first_id)
        return found

    monkeypatch.setattr(StandingApprovalRepository, "candidates", first_spent_meanwhile)
    created = await request(client, requester)
    assert created["status"] == "approved"
    assert created["standing_approval_id"] == second_id
    assert [p["standing_id"] for p in uses_alone] == [uuid.UUID(second_id)]
