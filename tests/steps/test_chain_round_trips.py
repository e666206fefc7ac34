"""What a PostgreSQL chain's vote reads before its one write, made without a lock: the
request and its chain in one statement, and whom the voter stands in for (out of
office) only when the step is not their own, nor a group's of which they are an active
member (there the state machine counts the vote as theirs)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from signoff.approvals.repository import ApprovalRepository
from tests.conftest import Org, create_approval
from tests.people.test_delegation import away
from tests.steps.test_group_steps import make_group, one_group_step
from tests.steps.test_steps import set_chain, vote

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("postgres_only")]


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """How many times a vote read its request (with its chain) and the delegation."""
    seen = {"request": 0, "delegation": 0}
    for name, counted in (("read_versioned", "request"), ("stood_in_for", "delegation")):
        original = getattr(ApprovalRepository, name)

        def counting(*args: Any, _original: Any = original, _key: str = counted, **kw: Any) -> Any:
            seen[_key] += 1
            return _original(*args, **kw)

        monkeypatch.setattr(ApprovalRepository, name, counting)
    return seen


async def test_a_vote_on_ones_own_step_reads_no_delegation(
    client: httpx.AsyncClient, org: Org, reads: dict[str, int]
) -> None:
    first, second = org.members[0], org.members[1]
    request = await create_approval(client, org.admin, is_sequential=True)
    steps = await set_chain(client, org.admin, request["id"], [first, second])
    for who, step, status in ((first, steps[0], "pending"), (second, steps[1], "approved")):
        reads.update(request=0, delegation=0)
        answer = await vote(client, who, request["id"], step["id"])
        assert answer.status_code == 200, answer.text
        assert answer.json()["request_status"] == status
        assert answer.json()["decided_by"] == who.user_id
        assert reads == {"request": 1, "delegation": 0}


async def test_a_group_members_vote_reads_no_delegation(
    client: httpx.AsyncClient, org: Org, reads: dict[str, int]
) -> None:
    group_id = await make_group(client, org, "Finance", org.members[:2])
    request_id, step = await one_group_step(client, org, group_id, required_approvals=1)
    reads.update(request=0, delegation=0)
    answer = await vote(client, org.members[1], request_id, step["id"])
    assert answer.json()["request_status"] == "approved", answer.text
    assert reads == {"request": 1, "delegation": 0}


async def test_a_delegates_vote_reads_whom_they_stand_in_for(
    client: httpx.AsyncClient, org: Org, reads: dict[str, int]
) -> None:
    ann, bob = org.members[0], org.members[1]
    assert (await away(client, ann, bob)).status_code == 200
    request = await create_approval(client, org.admin, is_sequential=True)
    (step,) = await set_chain(client, org.admin, request["id"], [ann])
    reads.update(request=0, delegation=0)
    answer = await vote(client, bob, request["id"], step["id"])
    assert answer.json()["request_status"] == "approved", answer.text
    assert reads == {"request": 1, "delegation": 1}
    events = await client.get(
        f"/api/v1/approvals/{request['id']}/events", headers=org.admin.headers
    )
    voted = [e for e in events.json()["data"] if e["type"] == "request.approved"]
    assert voted[0]["data"]["on_behalf_of"] == ann.user_id
