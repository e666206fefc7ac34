"""Separation of duties (issue 36): the org's ``self_approval`` setting, through the API,
the dashboard's form and page, and the first-run setup."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest

from signoff.context import AppContext
from signoff.models import Connection
from tests.conftest import Member, Org, assert_error, create_approval
from tests.dashboard.support import post_form, signed_in
from tests.steps.test_steps import set_chain, vote

# The settings document with nothing changed but what a test names.
NO_STANDING_CAPS = {"max_ttl_seconds": None, "max_uses": None, "forbidden_action_types": []}


def settings_doc(self_approval: str = "allow", passkey_for: str = "off") -> dict[str, object]:
    return {
        "self_approval": self_approval,
        "passkey_for": passkey_for,
        "standing_approvals": NO_STANDING_CAPS,
    }


async def forbid(client: httpx.AsyncClient, org: Org) -> None:
    changed = await client.patch(
        "/api/v1/org/settings", headers=org.admin.headers, json={"self_approval": "forbid"}
    )
    assert changed.status_code == 200, changed.text
    assert changed.json() == settings_doc("forbid", "off")


async def _decide(
    client: httpx.AsyncClient, request: dict[str, Any], who: Member
) -> httpx.Response:
    return await client.patch(
        f"/api/v1/approvals/{request['id']}", headers=who.headers, json={"decision": "approve"}
    )


# ---- the settings document ----


async def test_settings_default_to_allow_and_every_member_reads_them(
    client: httpx.AsyncClient, org: Org
) -> None:
    read = await client.get("/api/v1/org/settings", headers=org.member.headers)
    assert read.status_code == 200, read.text
    assert read.json() == settings_doc("allow", "off")


async def test_only_admins_change_settings(client: httpx.AsyncClient, org: Org) -> None:
    refused = await client.patch(
        "/api/v1/org/settings", headers=org.member.headers, json={"self_approval": "forbid"}
    )
    assert_error(refused, 403, "FORBIDDEN")
    read = await client.get("/api/v1/org/settings", headers=org.admin.headers)
    assert read.json() == settings_doc("allow", "off")


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({"self_approval": "sometimes"}, ["self_approval"]),
        ({"self_approval": True}, ["self_approval"]),
        ({"selfApproval": "forbid", "colour": "red"}, ["selfApproval", "colour"]),
        ({"self_approval": "forbid", "nope": 1}, ["nope"]),
    ],
)
async def test_unknown_settings_and_values_are_named_and_nothing_changes(
    client: httpx.AsyncClient, org: Org, body: dict[str, Any], named: list[str]
) -> None:
    refused = await client.patch("/api/v1/org/settings", headers=org.admin.headers, json=body)
    details = assert_error(refused, 400, "VALIDATION_ERROR")
    assert [f["field"] for f in details["fields"]] == named
    read = await client.get("/api/v1/org/settings", headers=org.admin.headers)
    assert read.json() == settings_doc("allow", "off")


async def test_a_body_that_is_no_object_is_refused(client: httpx.AsyncClient, org: Org) -> None:
    refused = await client.patch(
        "/api/v1/org/settings", headers=org.admin.headers, content=b'["forbid"]'
    )
    assert_error(refused, 400, "VALIDATION_ERROR")


# ---- four-eyes on the API ----


async def test_allow_keeps_todays_behaviour(client: httpx.AsyncClient, org: Org) -> None:
    request = await create_approval(client, org.member)
    assert (await _decide(client, request, org.member)).status_code == 200


async def test_forbid_refuses_the_requesting_key_and_lets_another_person_decide(
    client: httpx.AsyncClient, org: Org
) -> None:
    await forbid(client, org)
    request = await create_approval(client, org.member)
    details = assert_error(
        await _decide(client, request, org.member), 403, "SELF_APPROVAL_FORBIDDEN"
    )
    assert details["request_id"] == request["id"]
    read = await client.get(f"/api/v1/approvals/{request['id']}", headers=org.admin.headers)
    assert read.json()["status"] == "pending"
    decided = await _decide(client, request, org.members[1])
    assert decided.status_code == 200 and decided.json()["status"] == "approved"


async def test_forbid_refuses_the_owner_through_another_of_their_connections(
    ctx: AppContext, client: httpx.AsyncClient, org: Org
) -> None:
    """The person is the requester, whichever key of theirs decides: even an admin."""
    await forbid(client, org)
    request = await create_approval(client, org.admin)
    # The admin's second connection: another key, the same person.
    from signoff.common.time import utcnow
    from signoff.orgs import service as orgs_service

    async with ctx.transaction() as uow:
        admin = await uow.orgs.get_user(uuid.UUID(org.id), uuid.UUID(org.admin.user_id))
        assert admin is not None
        issued = await orgs_service.create_connection(
            uow.orgs, ctx.box, ctx.settings, uuid.UUID(org.id), owner=admin,
            name="second", rate_limit=None, now=utcnow(),
        )  # fmt: skip
    second = Member(**{**org.admin.__dict__, "api_key": issued.api_key})
    assert_error(await _decide(client, request, second), 403, "SELF_APPROVAL_FORBIDDEN")


async def test_forbid_refuses_the_requesting_key_after_the_connection_changed_hands(
    ctx: AppContext, client: httpx.AsyncClient, org: Org
) -> None:
    """The connection's new owner is the requester now; its key still may not decide."""
    await forbid(client, org)
    request = await create_approval(client, org.member)
    async with ctx.transaction() as uow:
        connection = await uow.session.get(Connection, uuid.UUID(org.member.connection_id))
        assert connection is not None
        connection.owner_id = uuid.UUID(org.members[1].user_id)
    assert_error(await _decide(client, request, org.member), 403, "SELF_APPROVAL_FORBIDDEN")
    assert_error(await _decide(client, request, org.members[1]), 403, "SELF_APPROVAL_FORBIDDEN")


async def test_forbid_refuses_a_step_vote_by_the_requester(
    client: httpx.AsyncClient, org: Org
) -> None:
    await forbid(client, org)
    request = await create_approval(client, org.member)
    steps = await set_chain(client, org.member, request["id"], [org.member, org.members[1]])
    refused = await vote(client, org.member, request["id"], steps[0]["id"])
    assert_error(refused, 403, "SELF_APPROVAL_FORBIDDEN")


async def test_a_setting_changed_bites_at_once(client: httpx.AsyncClient, org: Org) -> None:
    """Principals are remembered between calls: the change must reach them at once."""
    request = await create_approval(client, org.member)
    await client.get("/api/v1/me", headers=org.member.headers)
    await forbid(client, org)
    assert_error(await _decide(client, request, org.member), 403, "SELF_APPROVAL_FORBIDDEN")
    allowed = await client.patch(
        "/api/v1/org/settings", headers=org.admin.headers, json={"self_approval": "allow"}
    )
    assert allowed.status_code == 200
    assert (await _decide(client, request, org.member)).status_code == 200


# ---- the dashboard ----


async def test_dashboard_hides_the_buttons_and_refuses_the_post(
    ctx: AppContext, client: httpx.AsyncClient, org: Org
) -> None:
    await forbid(client, org)
    request = await create_approval(client, org.member)
    await signed_in(ctx, client, org.member)
    url = f"/requests/{request['id']}"
    page = (await client.get(url)).text
    assert 'name="decision"' not in page
    assert "requires a second person" in page
    # A form posted anyway (an old tab): refused, nothing decided.
    from tests.dashboard.support import csrf_of

    refused = await client.post(
        f"{url}/decision", data={"csrf_token": csrf_of(page), "decision": "approve"}
    )
    assert refused.status_code == 303
    shown = (await client.get(url)).text
    assert "forbids self-approval" in shown and "Pending" in shown


async def test_dashboard_shows_the_buttons_to_another_person(
    ctx: AppContext, client: httpx.AsyncClient, org: Org
) -> None:
    await forbid(client, org)
    request = await create_approval(client, org.member)
    await signed_in(ctx, client, org.members[1])
    url = f"/requests/{request['id']}"
    assert 'name="decision"' in (await client.get(url)).text
    decided = await post_form(client, url, f"{url}/decision", decision="approve")
    assert decided.status_code == 303
    read = await client.get(f"/api/v1/approvals/{request['id']}", headers=org.admin.headers)
    assert read.json()["status"] == "approved"


async def test_the_inbox_leaves_out_one_s_own_requests_under_four_eyes(
    ctx: AppContext, client: httpx.AsyncClient, org: Org
) -> None:
    from signoff.approvals.listing import InboxFilters, count_waiting, read_inbox
    from signoff.common.time import utcnow

    own = await create_approval(client, org.member, title="Mine")
    theirs = await create_approval(client, org.members[1], title="Theirs")

    async def waiting(hide_own: bool) -> set[str]:
        import orjson

        found = await read_inbox(
            ctx.db.queries, uuid.UUID(org.id), uuid.UUID(org.member.user_id),
            InboxFilters(hide_own=hide_own), now=utcnow(), offset=0, limit=50,
        )  # fmt: skip
        counted, _ = await count_waiting(
            ctx.db.queries, uuid.UUID(org.id), uuid.UUID(org.member.user_id),
            now=utcnow(), hide_own=hide_own,
        )  # fmt: skip
        ids = {orjson.loads(item)["id"] for item in found.rendered}
        assert counted == len(ids) == found.total
        return ids

    assert await waiting(False) == {own["id"], theirs["id"]}
    assert await waiting(True) == {theirs["id"]}
    await forbid(client, org)
    await signed_in(ctx, client, org.member)
    inbox = (await client.get("/")).text
    assert "Theirs" in inbox and "Mine" not in inbox


async def test_passkey_for_is_a_setting_the_api_enforces(
    client: httpx.AsyncClient, org: Org
) -> None:
    """``passkey_for`` through the settings document: once ``critical``, an API key no
    longer decides a critical request (403 PASSKEY_REQUIRED), and a bad value is a 400."""
    bad = await client.patch(
        "/api/v1/org/settings", headers=org.admin.headers, json={"passkey_for": "sometimes"}
    )
    assert_error(bad, 400, "VALIDATION_ERROR")
    changed = await client.patch(
        "/api/v1/org/settings", headers=org.admin.headers, json={"passkey_for": "critical"}
    )
    assert changed.status_code == 200, changed.text
    assert changed.json() == settings_doc("allow", "critical")
    critical = await create_approval(client, org.admin, priority="critical")
    answer = await _decide(client, critical, org.admin)
    assert_error(answer, 403, "PASSKEY_REQUIRED")
    routine = await create_approval(client, org.admin, priority="low")
    assert (await _decide(client, routine, org.admin)).status_code == 200
