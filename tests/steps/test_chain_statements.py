"""What a SQLite chain costs its writer, in statements: a configuration writes its
steps in one statement and answers the chain it wrote without reading it; a step vote
reads the request and its chain once each, under the lock, reads whom the voter
stands in for (out of office) only when the step is not their own, and answers the voted
step as written, not read again. A chain of people writes no entry of the group steps'
index."""

from __future__ import annotations

import httpx
import pytest
from sqlalchemy import text

from signoff.context import AppContext
from tests.conftest import Member, Org, create_approval
from tests.people.test_delegation import away
from tests.steps.test_group_steps import make_group, one_group_step
from tests.steps.test_steps import set_chain, vote

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.parametrize("test_database", ["sqlite"], indirect=True),
]


def _reads(statements: list[str]) -> dict[str, int]:
    """How many times the writer read the request, its chain, and the org's users (the
    delegation read: the away people the voter stands in for, with their names)."""
    return {
        "requests": sum(s.startswith("SELECT approval_requests.") for s in statements),
        "steps": sum(s.startswith("SELECT approval_steps.") for s in statements),
        "users": sum(s.startswith("SELECT users.") for s in statements),
    }


async def _chain(
    client: httpx.AsyncClient, org: Org, approvers: list[Member]
) -> tuple[str, list[str]]:
    request = await create_approval(client, org.admin, is_sequential=True)
    steps = await set_chain(client, org.admin, request["id"], approvers)
    return request["id"], [step["id"] for step in steps]


async def test_a_configuration_answers_its_chain_without_reading_it(
    client: httpx.AsyncClient, org: Org, statements: list[str]
) -> None:
    request = await create_approval(client, org.admin, is_sequential=True)
    statements.clear()
    steps = await set_chain(client, org.admin, request["id"], org.members[:3])
    # The request read, the approvers checked.
    assert _reads(statements) == {"requests": 1, "steps": 0, "users": 1}
    # Its three steps, in one statement.
    assert sum(s.startswith("INSERT INTO approval_steps") for s in statements) == 1
    listed = await client.get(f"/api/v1/approvals/{request['id']}/steps", headers=org.admin.headers)
    assert [
        {key: step[key] for key in ("id", "step_order", "approver_id", "status")}
        for step in listed.json()["data"]
    ] == steps
    # Replaced before any vote: the new chain, as written.
    statements.clear()
    again = await set_chain(client, org.admin, request["id"], org.members[1:3])
    assert _reads(statements)["steps"] == 1  # the chain replaced, read for the state machine
    listed = await client.get(f"/api/v1/approvals/{request['id']}/steps", headers=org.admin.headers)
    assert [step["id"] for step in listed.json()["data"]] == [step["id"] for step in again]


async def test_a_vote_on_ones_own_step_reads_no_delegation_and_the_chain_once(
    client: httpx.AsyncClient, org: Org, statements: list[str]
) -> None:
    first, second = org.members[0], org.members[1]
    request_id, steps = await _chain(client, org, [first, second])
    statements.clear()
    answer = await vote(client, first, request_id, steps[0], comment="fine")
    assert answer.status_code == 200, answer.text
    assert _reads(statements) == {"requests": 1, "steps": 1, "users": 0}
    listed = await client.get(f"/api/v1/approvals/{request_id}/steps", headers=org.admin.headers)
    stored = listed.json()["data"][0]
    assert {key: answer.json()[key] for key in stored} == stored  # answered as written
    assert (stored["status"], stored["decided_by"], stored["comment"]) == (
        "approved",
        first.user_id,
        "fine",
    )
    statements.clear()
    last = await vote(client, second, request_id, steps[1])
    assert last.json()["request_status"] == "approved", last.text
    assert _reads(statements) == {"requests": 1, "steps": 1, "users": 0}


async def test_a_vote_on_someone_elses_step_still_reads_whom_the_voter_stands_in_for(
    client: httpx.AsyncClient, org: Org, statements: list[str]
) -> None:
    ann, bob = org.members[0], org.members[1]
    assert (await away(client, ann, bob)).status_code == 200
    request_id, steps = await _chain(client, org, [ann])
    statements.clear()
    answer = await vote(client, bob, request_id, steps[0])
    assert answer.status_code == 200, answer.text
    assert _reads(statements) == {"requests": 1, "steps": 1, "users": 1}
    assert answer.json()["request_status"] == "approved"
    events = await client.get(f"/api/v1/approvals/{request_id}/events", headers=org.admin.headers)
    voted = [e for e in events.json()["data"] if e["type"] == "request.approved"]
    assert voted[0]["data"]["on_behalf_of"] == ann.user_id


async def _entries(ctx: AppContext, index: str) -> int:
    """The entries ``index`` holds (SQLite's ``dbstat``: the cells of its leaf pages)."""
    query = "SELECT coalesce(sum(ncell), 0) FROM dbstat WHERE name = :index AND pagetype = 'leaf'"
    async with ctx.reading() as uow:
        return int((await uow.session.execute(text(query), {"index": index})).scalar_one())


async def test_the_group_steps_index_holds_group_steps_only(
    ctx: AppContext, client: httpx.AsyncClient, org: Org
) -> None:
    request_id, steps = await _chain(client, org, org.members[:3])
    for who, step in zip(org.members[:3], steps, strict=True):
        assert (await vote(client, who, request_id, step)).status_code == 200
    assert await _entries(ctx, "ix_approval_steps_group_status") == 0
    assert await _entries(ctx, "ix_approval_steps_approver_status") == 3
    group_id = await make_group(client, org, "Finance", org.members[:2])
    await one_group_step(client, org, group_id)
    assert await _entries(ctx, "ix_approval_steps_group_status") == 1
    # Its one reader, the foreign key's when a group goes, finds the steps by it.
    async with ctx.reading() as uow:
        plan = await uow.session.execute(
            text(
                "EXPLAIN QUERY PLAN UPDATE approval_steps SET group_id = NULL WHERE group_id = :g"
            ),
            {"g": group_id},
        )
        assert "INDEX ix_approval_steps_group_status (group_id=?)" in " ".join(r[3] for r in plan)
