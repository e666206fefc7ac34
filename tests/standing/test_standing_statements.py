"""What a standing-approval hit costs SQLite's writer, in statements (issue 36: a hit
answered as fast as a plain create): its use is taken by the request's insert (the
trigger of migration 0051), not by an UPDATE of its own, and still counted once."""

from __future__ import annotations

import httpx
import pytest

from signoff.approvals.repository import ApprovalRepository
from tests.conftest import Org, approval_body
from tests.standing.support import DEPLOY, grant, request, standing_list

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.parametrize("test_database", ["sqlite"], indirect=True),
]


def _writes_to(statements: list[str], table: str) -> list[str]:
    return [s for s in statements if s.startswith(f"UPDATE {table} ")]


async def test_a_hit_takes_its_use_in_the_insert_not_an_update(
    client: httpx.AsyncClient, org: Org, statements: list[str]
) -> None:
    requester, approver = org.members[0], org.members[1]
    await grant(client, requester, approver, {"max_uses": 2})
    statements.clear()
    first = await request(client, requester)
    assert first["status"] == "approved"
    assert _writes_to(statements, "standing_approvals") == []
    second = await request(client, requester)
    assert second["status"] == "approved"
    third = await request(client, requester)
    assert third["status"] == "pending"  # two uses, both taken
    assert await standing_list(client, approver) == []  # used up: no longer live


async def test_the_uses_are_counted_once_each_and_a_replay_takes_none(
    client: httpx.AsyncClient, org: Org, statements: list[str]
) -> None:
    requester, approver = org.members[0], org.members[1]
    await grant(client, requester, approver, {"max_uses": 5})
    first = await request(client, requester, idempotency_key="k-1")
    replay = await client.post(
        "/api/v1/approvals",
        json=approval_body(**DEPLOY, idempotency_key="k-1"),
        headers=requester.headers,
    )
    assert replay.json()["id"] == first["id"]
    await request(client, requester)
    (standing,) = await standing_list(client, approver)
    assert standing["uses"] == 2
    assert _writes_to(statements, "standing_approvals") == []


async def test_a_hit_writes_its_events_in_one_statement_and_keeps_both(
    client: httpx.AsyncClient, org: Org, statements: list[str]
) -> None:
    """``request.created`` and ``request.approved`` both stay in the trail, in order,
    written by one insert (a trigger's run of it traces the same text again)."""
    requester, approver = org.members[0], org.members[1]
    standing_id = await grant(client, requester, approver, {"max_uses": 3})
    statements.clear()
    hit = await request(client, requester)
    inserts = {s for s in statements if s.startswith("INSERT INTO audit_events ")}
    assert len(inserts) == 1
    events = await client.get(f"/api/v1/approvals/{hit['id']}/events", headers=approver.headers)
    kinds = [(e["type"], e["actor_id"]) for e in events.json()["data"]]
    assert kinds == [("request.created", requester.user_id), ("request.approved", None)]
    approved = events.json()["data"][1]["data"]
    assert approved["standing_approval"]["id"] == standing_id
    assert approved["standing_approval"]["uses"] == 1


async def test_a_hit_flushes_nothing_after_its_decision(
    client: httpx.AsyncClient, org: Org, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite makes a queued write at once: once the decision's event and receipt are
    written, a flush has nothing left to send, and a hit asks for none (a plain create
    never did). The receipt is there all the same."""
    requester, approver = org.members[0], org.members[1]
    await grant(client, requester, approver, {"max_uses": 3})
    flushes: list[object] = []
    real = ApprovalRepository.flush

    async def counted(self: ApprovalRepository) -> None:
        flushes.append(self)
        await real(self)

    monkeypatch.setattr(ApprovalRepository, "flush", counted)
    hit = await request(client, requester)
    assert hit["status"] == "approved"
    assert flushes == []
    read = await client.get(f"/api/v1/approvals/{hit['id']}", headers=requester.headers)
    assert read.json()["receipt_issued"] is True and read.json()["receipt"]
