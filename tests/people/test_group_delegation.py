"""Out of office reaches group membership, on SQLite and PostgreSQL: while Ann (a member
of Finance) is away, her delegate Bob sees Finance's steps in his inbox and votes them
for her ("Bob for Ann"); Ann counts once whoever votes; a delegate who is a member in
their own right still casts one vote a step."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from signoff.context import AppContext
from tests.conftest import Member, Org, assert_error, create_org
from tests.dashboard.support import browser_client, post_form, signed_in
from tests.people.test_delegation import _inbox_ids, away
from tests.steps.test_group_steps import make_group, one_group_step, status_of
from tests.steps.test_steps import vote

pytestmark = pytest.mark.anyio


@pytest.fixture
async def big_org(ctx: AppContext) -> Org:
    """An admin and five members: Finance holds Ann (0), Carl (2) and Dora (3); Bob (1)
    is not in it."""
    return await create_org(ctx, "Initech", members=5)


async def finance(client: httpx.AsyncClient, org: Org) -> str:
    ann, carl, dora = org.members[0], org.members[2], org.members[3]
    return await make_group(client, org, "Finance", [ann, carl, dora])


async def assigned_ids(client: httpx.AsyncClient, who: Member) -> list[str]:
    listed = await client.get("/api/v1/approvals?assigned_to=me", headers=who.headers)
    assert listed.status_code == 200, listed.text
    return [item["id"] for item in listed.json()["data"]]


async def events_of(client: httpx.AsyncClient, org: Org, request_id: str) -> list[dict[str, Any]]:
    read = await client.get(f"/api/v1/approvals/{request_id}/events", headers=org.admin.headers)
    assert read.status_code == 200, read.text
    events: list[dict[str, Any]] = read.json()["data"]
    return events


async def ann_away_to_bob(
    client: httpx.AsyncClient, org: Org, required_approvals: int
) -> tuple[str, dict[str, Any]]:
    """A request of one Finance step (``required_approvals`` of it), Ann away to Bob:
    the request's id and its step."""
    group_id = await finance(client, org)
    request_id, step = await one_group_step(
        client, org, group_id, required_approvals=required_approvals
    )
    assert (await away(client, org.members[0], org.members[1])).status_code == 200
    return request_id, step


async def test_the_delegate_sees_and_votes_a_group_step_for_the_away_member(
    client: httpx.AsyncClient, ctx: AppContext, big_org: Org
) -> None:
    org = big_org
    ann, bob, carl = org.members[0], org.members[1], org.members[2]
    group_id = await finance(client, org)
    request_id, step = await one_group_step(client, org, group_id, required_approvals=2)
    # Before Ann is away Bob, no member, neither sees nor votes it.
    assert request_id not in await assigned_ids(client, bob)
    assert_error(await vote(client, bob, request_id, step["id"]), 403, "FORBIDDEN")

    assert (await away(client, ann, bob)).status_code == 200
    assert request_id in await assigned_ids(client, bob)
    assert request_id in await _inbox_ids(ctx, org, bob)
    voted = await vote(client, bob, request_id, step["id"])
    assert voted.status_code == 200, voted.text
    assert await status_of(client, org.admin, request_id) == "pending"  # 1 of 2
    (recorded,) = [e for e in await events_of(client, org, request_id)
                   if e["type"] == "step.vote_recorded"]  # fmt: skip
    assert recorded["data"]["on_behalf_of"] == ann.user_id

    # Ann's vote is cast: neither she nor Bob votes again, and it left their lists.
    assert request_id not in await assigned_ids(client, bob)
    assert request_id not in await assigned_ids(client, ann)
    again = await vote(client, bob, request_id, step["id"])
    assert_error(again, 409, "ALREADY_VOTED")
    herself = await vote(client, ann, request_id, step["id"])
    assert_error(herself, 409, "ALREADY_VOTED")

    # Carl's own vote completes the quorum of two distinct members.
    assert (await vote(client, carl, request_id, step["id"])).status_code == 200
    read = (await client.get(f"/api/v1/approvals/{request_id}", headers=org.admin.headers)).json()
    assert read["status"] == "approved"
    assert read["decided_by"] == carl.user_id


async def test_the_delegates_vote_names_them_for_the_member_when_it_decides(
    client: httpx.AsyncClient, big_org: Org
) -> None:
    org = big_org
    ann, bob = org.members[0], org.members[1]
    request_id, step = await ann_away_to_bob(client, org, 1)
    decided = await vote(client, bob, request_id, step["id"])
    assert decided.status_code == 200, decided.text
    read = (await client.get(f"/api/v1/approvals/{request_id}", headers=org.admin.headers)).json()
    assert read["status"] == "approved"
    assert read["decided_by"] == bob.user_id
    assert read["decided_by_name"] == f"{bob.name} for {ann.name}"
    approved = [e for e in await events_of(client, org, request_id) if e["type"] == "step.approved"]
    assert approved and approved[-1]["data"]["on_behalf_of"] == ann.user_id


async def test_ann_voting_first_leaves_her_delegate_nothing_to_vote(
    client: httpx.AsyncClient, ctx: AppContext, big_org: Org
) -> None:
    org = big_org
    ann, bob = org.members[0], org.members[1]
    request_id, step = await ann_away_to_bob(client, org, 2)
    assert (await vote(client, ann, request_id, step["id"])).status_code == 200
    assert request_id not in await assigned_ids(client, bob)
    assert request_id not in await _inbox_ids(ctx, org, bob)
    assert_error(await vote(client, bob, request_id, step["id"]), 409, "ALREADY_VOTED")


async def test_a_delegate_who_is_a_member_casts_one_vote(
    client: httpx.AsyncClient, big_org: Org
) -> None:
    org = big_org
    ann, carl, dora = org.members[0], org.members[2], org.members[3]
    group_id = await finance(client, org)
    request_id, step = await one_group_step(client, org, group_id, required_approvals=3)
    # Carl, a member himself, stands in for Ann: his vote is his own, once.
    assert (await away(client, ann, carl)).status_code == 200
    assert (await vote(client, carl, request_id, step["id"])).status_code == 200
    events = await events_of(client, org, request_id)
    (recorded,) = [e for e in events if e["type"] == "step.vote_recorded"]
    assert "on_behalf_of" not in recorded["data"]
    assert_error(await vote(client, carl, request_id, step["id"]), 409, "ALREADY_VOTED")
    assert request_id not in await assigned_ids(client, carl)
    # Ann still counts for herself, and with Dora's the quorum of three is reached.
    assert (await vote(client, ann, request_id, step["id"])).status_code == 200
    assert (await vote(client, dora, request_id, step["id"])).status_code == 200
    assert await status_of(client, org.admin, request_id) == "approved"


async def test_the_request_page_lets_the_delegate_vote_as_bob_for_ann(
    client: httpx.AsyncClient, ctx: AppContext, big_org: Org, app: Any
) -> None:
    org = big_org
    ann, bob = org.members[0], org.members[1]
    request_id, _ = await ann_away_to_bob(client, org, 2)
    async with browser_client(app) as bob_browser:
        await signed_in(ctx, bob_browser, bob)
        assert "Pay the invoice" in (await bob_browser.get("/")).text
        url = f"/requests/{request_id}"
        shown = (await bob_browser.get(url)).text
        assert 'name="decision"' in shown
        assert f"{ann.name} is away: your vote counts as theirs." in shown
        decided = await post_form(bob_browser, url, f"{url}/decision", decision="approve")
        assert decided.status_code == 303
        after = (await bob_browser.get(url)).text
        assert f"{bob.name} for {ann.name}</strong>" in after
        assert 'name="decision"' not in after, "one vote: no buttons left for Bob"
