"""Out of office (issue 36): ``/api/v1/me/delegation``, the delegate's inbox and votes
("Bob for Ann"), two hops at most, and the refusals that store nothing."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import httpx

from signoff.approvals.listing import InboxFilters, read_inbox
from signoff.common.time import format_timestamp, utcnow
from signoff.context import AppContext
from signoff.models import User
from tests.conftest import Member, Org, assert_error, create_approval
from tests.dashboard.support import post_form, signed_in
from tests.steps.test_steps import set_chain, vote

URL = "/api/v1/me/delegation"


def _until(days: int = 7) -> str:
    stamp = format_timestamp(utcnow() + timedelta(days=days))
    assert stamp is not None
    return stamp


async def away(
    client: httpx.AsyncClient, who: Member, delegate: Member, **extra: Any
) -> httpx.Response:
    body = {"away_until": _until(), "delegate_id": delegate.user_id, **extra}
    return await client.put(URL, headers=who.headers, json=body)


async def _stored(client: httpx.AsyncClient, who: Member) -> dict[str, Any]:
    read = await client.get(URL, headers=who.headers)
    assert read.status_code == 200, read.text
    body: dict[str, Any] = read.json()
    return body


async def _inbox_ids(ctx: AppContext, org: Org, who: Member) -> list[str]:
    found = await read_inbox(
        ctx.db.queries, uuid.UUID(org.id), uuid.UUID(who.user_id), InboxFilters(),
        now=utcnow(), offset=0, limit=50,
    )  # fmt: skip
    import orjson

    return [orjson.loads(item)["id"] for item in found.rendered]


# ---- the API ----


async def test_set_read_and_end_a_delegation(client: httpx.AsyncClient, org: Org) -> None:
    ann, bob = org.members[0], org.members[1]
    assert await _stored(client, ann) == {
        "away_from": None, "away_until": None, "delegate_id": None,
        "delegate_name": None, "away_now": False,
    }  # fmt: skip
    set_ = await away(client, ann, bob)
    assert set_.status_code == 200, set_.text
    body = set_.json()
    assert body["delegate_id"] == bob.user_id and body["delegate_name"] == bob.name
    assert body["away_now"] is True and body["away_until"].endswith("Z")
    assert await _stored(client, ann) == body
    ended = await client.delete(URL, headers=ann.headers)
    assert ended.status_code == 204
    assert (await _stored(client, ann))["delegate_id"] is None


async def test_refusals_store_nothing(
    ctx: AppContext, client: httpx.AsyncClient, org: Org, other_org: Org
) -> None:
    ann, bob, carl = org.members[0], org.members[1], org.members[2]
    async with ctx.transaction() as uow:
        user = await uow.session.get(User, uuid.UUID(carl.user_id))
        assert user is not None
        user.deactivated_at = utcnow()
    now = utcnow()
    cases: list[tuple[dict[str, Any], str]] = [
        ({"delegate_id": ann.user_id}, "delegate_id"),  # oneself
        ({"delegate_id": carl.user_id}, "delegate_id"),  # deactivated
        ({"delegate_id": other_org.member.user_id}, "delegate_id"),  # another org's
        ({"delegate_id": str(uuid.uuid4())}, "delegate_id"),  # nobody
        ({"away_until": format_timestamp(now - timedelta(hours=1))}, "away_until"),
        (
            {
                "away_from": format_timestamp(now + timedelta(days=3)),
                "away_until": format_timestamp(now + timedelta(days=2)),
            },
            "away_until",
        ),
        ({"away_until": _until(days=400)}, "away_until"),
    ]
    for extra, field in cases:
        body = {"away_until": _until(), "delegate_id": bob.user_id, **extra}
        refused = await client.put(URL, headers=ann.headers, json=body)
        details = assert_error(refused, 400, "VALIDATION_ERROR")
        assert field in str(details), (extra, details)
        assert (await _stored(client, ann))["delegate_id"] is None, extra
    naive = await client.put(
        URL,
        headers=ann.headers,
        json={"away_until": "2030-01-01T00:00:00", "delegate_id": bob.user_id},
    )
    assert_error(naive, 400, "VALIDATION_ERROR")


async def test_a_loop_is_refused(client: httpx.AsyncClient, org: Org) -> None:
    ann, bob, carl = org.members[0], org.members[1], org.members[2]
    assert (await away(client, ann, bob)).status_code == 200
    refused = await away(client, bob, ann)
    assert "loop" in assert_error(refused, 400, "VALIDATION_ERROR")["fields"][0]["message"]
    assert (await away(client, bob, carl)).status_code == 200
    # Carl → Ann closes Ann → Bob → Carl.
    assert_error(await away(client, carl, ann), 400, "VALIDATION_ERROR")
    assert (await _stored(client, carl))["delegate_id"] is None


# ---- while away ----


async def test_the_delegate_sees_and_votes_the_step_as_bob_for_ann(
    ctx: AppContext, client: httpx.AsyncClient, org: Org
) -> None:
    requester, ann, bob = org.admin, org.members[0], org.members[1]
    request = await create_approval(client, requester)
    steps = await set_chain(client, requester, request["id"], [ann])
    assert request["id"] not in await _inbox_ids(ctx, org, bob)
    refused = await vote(client, bob, request["id"], steps[0]["id"])
    assert_error(refused, 403, "FORBIDDEN")
    assert (await away(client, ann, bob)).status_code == 200
    assert request["id"] in await _inbox_ids(ctx, org, bob)
    voted = await vote(client, bob, request["id"], steps[0]["id"])
    assert voted.status_code == 200, voted.text
    read = (
        await client.get(f"/api/v1/approvals/{request['id']}", headers=requester.headers)
    ).json()
    assert read["status"] == "approved"
    assert read["decided_by"] == bob.user_id
    assert read["decided_by_name"] == f"{bob.name} for {ann.name}"
    events = (
        await client.get(f"/api/v1/approvals/{request['id']}/events", headers=requester.headers)
    ).json()["data"]
    step_events = [e for e in events if e["type"].startswith("step.")]
    assert step_events and step_events[-1]["data"]["on_behalf_of"] == ann.user_id


async def test_a_delegate_away_passes_it_on_two_hops_at_most(
    ctx: AppContext, client: httpx.AsyncClient, org: Org
) -> None:
    requester, ann, bob, carl = org.admin, org.members[0], org.members[1], org.members[2]
    request = await create_approval(client, requester)
    await set_chain(client, requester, request["id"], [ann])
    assert (await away(client, ann, bob)).status_code == 200
    assert (await away(client, bob, carl)).status_code == 200
    assert request["id"] in await _inbox_ids(ctx, org, carl)
    # A third hop is never followed: Carl away to the admin does not reach the admin.
    assert (await away(client, carl, requester)).status_code == 200
    assert request["id"] not in await _inbox_ids(ctx, org, requester)


async def test_after_the_window_the_step_waits_for_ann_alone(
    ctx: AppContext, client: httpx.AsyncClient, org: Org
) -> None:
    requester, ann, bob = org.admin, org.members[0], org.members[1]
    request = await create_approval(client, requester)
    steps = await set_chain(client, requester, request["id"], [ann])
    later = utcnow() + timedelta(days=2)
    assert (await away(client, ann, bob, away_from=format_timestamp(later))).status_code == 200
    assert request["id"] not in await _inbox_ids(ctx, org, bob)
    assert_error(await vote(client, bob, request["id"], steps[0]["id"]), 403, "FORBIDDEN")


# ---- the dashboard ----


async def test_account_page_sets_it_and_the_request_page_lets_bob_vote(
    ctx: AppContext, client: httpx.AsyncClient, org: Org, app: Any
) -> None:
    from tests.dashboard.support import browser_client

    requester, ann, bob = org.admin, org.members[0], org.members[1]
    request = await create_approval(client, requester)
    await set_chain(client, requester, request["id"], [ann])
    await signed_in(ctx, client, ann)
    until = (utcnow() + timedelta(days=3)).strftime("%Y-%m-%dT%H:%M")
    saved = await post_form(
        client, "/account", "/account/delegation", away_until=until, delegate_id=bob.user_id
    )
    assert saved.status_code == 303
    page = (await client.get("/account")).text
    assert "stands in" in page and bob.name in page
    # Oneself is refused, with the reason shown.
    refused = await post_form(
        client, "/account", "/account/delegation", away_until=until, delegate_id=ann.user_id
    )
    assert refused.status_code == 303
    assert "your own delegate" in (await client.get("/account")).text
    async with browser_client(app) as bob_browser:
        await signed_in(ctx, bob_browser, bob)
        inbox = (await bob_browser.get("/")).text
        assert request["title"] in inbox
        url = f"/requests/{request['id']}"
        shown = (await bob_browser.get(url)).text
        assert 'name="decision"' in shown and "you vote for them" in shown
        decided = await post_form(bob_browser, url, f"{url}/decision", decision="approve")
        assert decided.status_code == 303
        after = (await bob_browser.get(url)).text
        assert f"{bob.name} for {ann.name}" in after
