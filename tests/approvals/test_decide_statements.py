"""What a SQLite decide costs its writer, in statements (issue 34): the request's
new state is written before it is read, by one ``UPDATE ... RETURNING``
(``state.UnreadDecision``); a request outside its condition is read and decided as ever."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest

from signoff.context import AppContext
from tests.conftest import Member, Org, create_approval
from tests.helpers import backdate_expiry

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.parametrize("test_database", ["sqlite"], indirect=True),
]


def _on_requests(statements: list[str]) -> list[str]:
    """The statements that read or write ``approval_requests`` (its search index's
    upkeep at commit left out)."""
    return [
        s
        for s in statements
        if s.startswith(("SELECT approval_requests.", "UPDATE approval_requests "))
    ]


async def _decide(
    client: httpx.AsyncClient, request_id: str, who: Member, **body: Any
) -> httpx.Response:
    return await client.patch(f"/api/v1/approvals/{request_id}", headers=who.headers, json=body)


@pytest.mark.parametrize(("decision", "status"), [("approve", "approved"), ("reject", "rejected")])
async def test_a_decision_writes_its_request_without_reading_it_first(
    client: httpx.AsyncClient, org: Org, statements: list[str], decision: str, status: str
) -> None:
    created = await create_approval(client, org.member)
    statements.clear()
    response = await _decide(client, created["id"], org.admin, decision=decision)
    assert response.status_code == 200, response.text
    (write,) = _on_requests(statements)
    assert write.startswith("UPDATE approval_requests ") and "RETURNING" in write
    # Its org has no channel: its create wrote no plan, so nothing was scheduled to void.
    assert not [s for s in statements if s.startswith("UPDATE notifications ")]
    body = response.json()
    assert (body["status"], body["decision_comment"]) == (status, None)
    assert body["decided_by"] == org.admin.user_id
    assert body["title"] == created["title"]  # the whole request, as written


async def test_a_request_the_condition_leaves_out_is_read_and_decided_as_ever(
    client: httpx.AsyncClient, org: Org, statements: list[str], ctx: AppContext
) -> None:
    """Two approvals needed: the first leaves the request pending, which the condition
    does not cover, so the request is read and decided as the state machine says; so are
    a second vote, a late one, an unknown request and an expired one."""
    created = await create_approval(client, org.member, required_approvals=2)
    statements.clear()
    first = await _decide(client, created["id"], org.admin, decision="approve")
    assert (first.json()["status"], first.json()["current_approvals"]) == ("pending", 1)
    kinds = [s.split(" ", 1)[0] for s in _on_requests(statements)]
    assert kinds == ["UPDATE", "SELECT", "UPDATE"]  # the try (no row), the read, the vote
    again = await _decide(client, created["id"], org.admin, decision="approve")
    assert again.status_code == 409  # voted already
    second = await _decide(client, created["id"], org.member, decision="approve")
    assert second.json()["status"] == "approved"
    late = await _decide(client, created["id"], org.member, decision="reject")
    assert late.status_code == 409
    unknown = await _decide(client, str(uuid.uuid4()), org.admin, decision="approve")
    assert unknown.status_code == 404
    expiring = await create_approval(client, org.member)
    await backdate_expiry(ctx, expiring["id"])
    expired = await _decide(client, expiring["id"], org.admin, decision="reject")
    assert expired.status_code == 409
    assert expired.json()["error"]["details"]["status"] == "expired"
