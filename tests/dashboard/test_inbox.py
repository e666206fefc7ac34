"""The inbox's order and count (``read_inbox``, ``count_waiting``), on SQLite and
PostgreSQL: most urgent first (priority, then the longest waiting) across pages; only
what waits for this person's vote now (votes cast, chains in turn); and a count that
stops at its cap and says so ("1,000+")."""

from __future__ import annotations

import re
import uuid
from typing import Any

import httpx
import orjson
import pytest

from signoff.approvals.listing import InboxFilters, count_waiting, inbox, read_inbox
from signoff.auth.principal import OrgMember
from signoff.common.time import utcnow
from signoff.context import AppContext
from signoff.dashboard import service as dashboard_service
from signoff.dashboard.service import ListView
from signoff.models import Organization, User
from tests.conftest import Member, Org, create_approval
from tests.dashboard.support import post_form, signed_in
from tests.helpers import NO_SWEEP


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    return NO_SWEEP


async def titles_waiting_for(
    ctx: AppContext, org: Org, who: Member, *, offset: int = 0, limit: int = 25, **filters: Any
) -> list[str]:
    found = await read_inbox(
        ctx.db.queries,
        uuid.UUID(org.id),
        uuid.UUID(who.user_id),
        InboxFilters(**filters),
        now=utcnow(),
        offset=offset,
        limit=limit,
    )
    return [_title(item) for item in found.rendered]


def _title(rendered: str) -> str:
    title: str = orjson.loads(rendered)["title"]
    return title


async def waiting(ctx: AppContext, org: Org, who: Member) -> tuple[int, bool]:
    return await count_waiting(
        ctx.db.queries, uuid.UUID(org.id), uuid.UUID(who.user_id), now=utcnow()
    )


async def test_most_urgent_first_across_pages(
    ctx: AppContext, client: httpx.AsyncClient, org: Org
) -> None:
    # Created in this order: within a priority, the older one comes first.
    for title, priority in [
        ("low, older", "low"),
        ("critical, older", "critical"),
        ("medium", "medium"),
        ("high, older", "high"),
        ("critical, newer", "critical"),
        ("low, newer", "low"),
        ("high, newer", "high"),
    ]:
        await create_approval(
            client, org.admin, title=title, priority=priority, action_type="deploy.prod"
        )
    expected = [
        "critical, older",
        "critical, newer",
        "high, older",
        "high, newer",
        "medium",
        "low, older",
        "low, newer",
    ]
    pages = [
        await titles_waiting_for(ctx, org, org.member, offset=offset, limit=3)
        for offset in (0, 3, 6, 9)
    ]
    assert pages == [expected[0:3], expected[3:6], expected[6:], []]
    assert await waiting(ctx, org, org.member) == (7, True)
    assert await titles_waiting_for(ctx, org, org.member, priority="high") == [
        "high, older",
        "high, newer",
    ]
    assert await titles_waiting_for(ctx, org, org.member, priority="high' OR 'a'='a") == []
    assert await titles_waiting_for(ctx, org, org.member, action_type="deploy.prod") == expected
    assert await titles_waiting_for(ctx, org, org.member, action_type="other") == []
    assert await titles_waiting_for(ctx, org, org.member, search="newer") == [
        "critical, newer",
        "high, newer",
        "low, newer",
    ]


async def test_requests_i_voted_on_leave_my_inbox_only(
    ctx: AppContext, client: httpx.AsyncClient, org: Org
) -> None:
    voted = await create_approval(client, org.admin, title="Two votes", required_approvals=2)
    await create_approval(client, org.admin, title="Untouched")
    answer = await client.patch(
        f"/api/v1/approvals/{voted['id']}", json={"decision": "approve"}, headers=org.member.headers
    )
    assert answer.status_code == 200, answer.text
    assert await titles_waiting_for(ctx, org, org.member) == ["Untouched"]
    assert await waiting(ctx, org, org.member) == (1, True)
    other = org.members[1]
    assert await titles_waiting_for(ctx, org, other) == ["Two votes", "Untouched"]
    assert await waiting(ctx, org, other) == (2, True)


async def test_chains_reach_each_approver_in_turn(
    ctx: AppContext, client: httpx.AsyncClient, org: Org
) -> None:
    first, second, bystander = org.members[0], org.members[1], org.members[2]
    in_turn = await create_approval(client, org.admin, title="In turn", is_sequential=True)
    together = await create_approval(client, org.admin, title="Together", priority="critical")
    for request in (in_turn, together):
        steps = [
            {"approver_id": member.user_id, "step_order": index + 1}
            for index, member in enumerate((first, second))
        ]
        configured = await client.post(
            f"/api/v1/approvals/{request['id']}/steps",
            json={"steps": steps},
            headers=org.admin.headers,
        )
        assert configured.status_code == 201, configured.text
    assert await titles_waiting_for(ctx, org, first) == ["Together", "In turn"]
    assert await titles_waiting_for(ctx, org, second) == ["Together"]
    assert await titles_waiting_for(ctx, org, bystander) == []
    assert await waiting(ctx, org, bystander) == (0, True)

    # The first step approved: the sequential chain moves on to the second approver.
    async with ctx.reading() as uow:
        step_ids = [s.id for s in await uow.approvals.list_steps(uuid.UUID(in_turn["id"]))]
    voted = await client.patch(
        f"/api/v1/approvals/{in_turn['id']}/steps/{step_ids[0]}",
        json={"decision": "approve"},
        headers=first.headers,
    )
    assert voted.status_code == 200, voted.text
    assert await titles_waiting_for(ctx, org, first) == ["Together"]
    assert await titles_waiting_for(ctx, org, second) == ["Together", "In turn"]
    assert await waiting(ctx, org, second) == (2, True)


async def test_the_count_stops_at_its_cap_and_says_so(
    ctx: AppContext, client: httpx.AsyncClient, org: Org, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(inbox, "WAITING_COUNT_CAP", 3)
    for index in range(5):
        await create_approval(client, org.admin, title=f"Request {index}", priority="low")
    assert await waiting(ctx, org, org.member) == (3, False)
    # Pages go on past the cap: the rows are read, only the count stops.
    assert len(await titles_waiting_for(ctx, org, org.member, offset=3, limit=25)) == 2

    member = await _org_member(ctx, org.member)
    pages = [
        await dashboard_service.inbox(ctx.db.queries, member, ListView(page=n), page_size=2)
        for n in (1, 2, 3)
    ]
    assert [len(p.rows) for p in pages] == [2, 2, 1]
    assert [p.total_text for p in pages] == ["3+", "3+", "3+"]
    assert [p.has_next for p in pages] == [True, True, False]

    await signed_in(ctx, client, org.member)
    page = (await client.get("/")).text
    assert "<title>(3+) Inbox" in page
    assert re.search(r"data-waiting-count>3\+</span>", page)
    assert 'data-waiting="3+"' in page
    # Every page's navigation carries the same bounded count.
    history = (await client.get("/history")).text
    assert re.search(r"data-waiting-count>3\+</span>", history)

    # Below the cap the count is exact again.
    first = (await client.get("/inbox/rows")).text
    request_id = re.findall(r'href="/requests/([^"]+)"', first)[0]
    decided = await post_form(
        client, f"/requests/{request_id}", f"/requests/{request_id}/decision", decision="approve"
    )
    assert decided.status_code == 303
    monkeypatch.setattr(inbox, "WAITING_COUNT_CAP", 1_000)
    assert "<title>(4) Inbox" in (await client.get("/")).text


async def _org_member(ctx: AppContext, who: Member) -> OrgMember:
    async with ctx.reading() as uow:
        user = await uow.session.get(User, uuid.UUID(who.user_id))
        assert user is not None
        org = await uow.session.get(Organization, user.org_id)
        assert org is not None
    return OrgMember.of(user, org)
