"""The admin pages over HTTP: connections, users, OAuth clients, deliveries, the
emergency stop, the audit log and the override of a chain, on SQLite and PostgreSQL.
(Who may open which page: test_authorization_walk.py.)"""

from __future__ import annotations

import html
import re
import uuid
from typing import Any

import httpx
import pytest
from bench.receiver import Receiver, Reply

from signoff.context import AppContext
from signoff.wiring import Wiring
from tests.conftest import Org, create_approval
from tests.dashboard.support import (
    browser_client,
    choose_own_password,
    post_form,
    sign_in,
    signed_in,
)
from tests.helpers import NO_SWEEP
from tests.oauth.support import bearer, forms_of, grant, register_client, token_request


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    # One attempt per delivery: a refused callback is "failed" at once, ready to retry.
    return {**NO_SWEEP, "delivery_retry_delays_seconds": []}


def shown(page: str, testid: str) -> str:
    found = re.search(rf'data-testid="{testid}"[^>]*>([^<]+)<', page)
    assert found, f"no {testid} on the page"
    return html.unescape(found.group(1))


def form_action(page: str, pattern: str) -> str:
    return next(f["action"] for f in forms_of(page) if re.search(pattern, f["action"]))


async def test_connection_created_its_key_works_rotated_limited_then_revoked(
    ctx: AppContext, app: Any, client: httpx.AsyncClient, org: Org
) -> None:
    async with browser_client(app) as admin:
        await signed_in(ctx, admin, org.admin)
        created = await post_form(
            admin, "/admin/connections", "/admin/connections", name="deploy-bot", rate_limit="120"
        )
        assert created.status_code == 200, created.text
        assert created.headers["cache-control"] == "no-store"
        key, secret = shown(created.text, "api-key"), shown(created.text, "webhook-secret")
        me = await client.get("/api/v1/me", headers={"Authorization": f"Bearer {key}"})
        assert me.status_code == 200 and me.json()["connection"]["name"] == "deploy-bot"
        assert me.json()["rate_limit"]["limit"] == 120

        listing = (await admin.get("/admin/connections")).text
        assert "deploy-bot" in listing and key not in listing and secret not in listing

        limit_action = form_action(listing, r"/rate-limit$")
        limited = await post_form(admin, "/admin/connections", limit_action, rate_limit="30")
        assert limited.status_code == 303
        rotate_action = form_action(listing, r"/rotate-secret$")
        rotated = await post_form(admin, "/admin/connections", rotate_action)
        assert rotated.status_code == 200 and shown(rotated.text, "webhook-secret") != secret

        revoke_action = form_action(listing, r"/revoke$")
        assert revoke_action.startswith("/admin/connections/")
        revoked = await post_form(admin, "/admin/connections", revoke_action)
        assert revoked.status_code == 303
        me = await client.get("/api/v1/me", headers={"Authorization": f"Bearer {key}"})
        assert me.status_code == 401

        # Without the CSRF token nothing happens.
        forged = await admin.post("/admin/connections", data={"name": "forged"})
        assert forged.status_code == 403
        assert "forged" not in (await admin.get("/admin/connections")).text


def last_used_of(page: str, name: str) -> str:
    """The Last used cell of the connection named ``name`` on the Connections page."""
    row = next(r for r in re.findall(r"<tr[^>]*>.*?</tr>", page, re.S) if f">{name}<" in r)
    found = re.search(r'data-testid="last-used"[^>]*>([^<]+)<', row)
    assert found, f"no last-used cell for {name}"
    return found.group(1)


async def test_connections_show_when_their_key_was_last_used(
    ctx: AppContext, wiring: Wiring, app: Any, client: httpx.AsyncClient, org: Org
) -> None:
    async with browser_client(app) as admin:
        await signed_in(ctx, admin, org.admin)
        created = await post_form(
            admin, "/admin/connections", "/admin/connections", name="nightly-job"
        )
        key = shown(created.text, "api-key")
        assert last_used_of((await admin.get("/admin/connections")).text, "nightly-job") == (
            "Never used"
        )
        headers = {"Authorization": f"Bearer {key}"}
        assert (await client.get("/api/v1/me", headers=headers)).status_code == 200
        await wiring.callers.connection_use.settled()  # recorded off the call's path
        page = (await admin.get("/admin/connections")).text
        assert last_used_of(page, "nightly-job") == "just now"
        row = next(r for r in re.findall(r"<tr[^>]*>.*?</tr>", page, re.S) if "nightly-job" in r)
        assert re.search(r'title="\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC"', row)

        # Further calls within the minute write nothing more.
        async with ctx.reading() as uow:
            first = {
                c.name: c.last_used_at for c in await uow.orgs.list_connections(uuid.UUID(org.id))
            }
        assert (await client.get("/api/v1/me", headers=headers)).status_code == 200
        await wiring.callers.connection_use.settled()
        async with ctx.reading() as uow:
            again = {
                c.name: c.last_used_at for c in await uow.orgs.list_connections(uuid.UUID(org.id))
            }
        assert again["nightly-job"] == first["nightly-job"] is not None


async def test_users_added_promoted_reset_and_deactivated_end_their_sessions(
    ctx: AppContext, app: Any, org: Org
) -> None:
    async with browser_client(app) as admin, browser_client(app, "203.0.113.9") as newcomer:
        await signed_in(ctx, admin, org.admin)
        added = await post_form(
            admin, "/admin/users", "/admin/users", name="Nia", email="nia@acme.test", role="member"
        )
        assert added.status_code == 200, added.text
        password = shown(added.text, "password")
        assert (await sign_in(newcomer, "nia@acme.test", password)).status_code == 303
        assert (await choose_own_password(newcomer, "nia's own password")).status_code == 303
        assert (await newcomer.get("/admin/users")).status_code == 403

        async with ctx.reading() as uow:
            nia = await uow.orgs.find_user_by_email(uuid.UUID(org.id), "nia@acme.test")
        assert nia is not None
        user_path = f"/admin/users/{nia.id}"
        nia_role = f"{user_path}/role"
        assert (await post_form(admin, "/admin/users", nia_role, role="admin")).status_code == 303
        assert (await newcomer.get("/admin/users")).status_code == 200  # read afresh

        reset = await post_form(admin, "/admin/users", f"{user_path}/reset-password")
        new_password = shown(reset.text, "password")
        assert new_password != password
        gone = await newcomer.get("/")
        assert gone.status_code == 303 and gone.headers["location"].startswith("/signin")
        assert (await sign_in(newcomer, "nia@acme.test", password)).status_code == 401
        assert (await sign_in(newcomer, "nia@acme.test", new_password)).status_code == 303

        deactivated = await post_form(admin, "/admin/users", f"{user_path}/deactivate")
        assert deactivated.status_code == 303
        ended = await newcomer.get("/")
        assert ended.status_code == 303 and ended.headers["location"].startswith("/signin")
        assert (await sign_in(newcomer, "nia@acme.test", new_password)).status_code == 401

        # An admin cannot lock themselves out.
        own = f"/admin/users/{org.admin.user_id}/deactivate"
        page = (await admin.get("/admin/users")).text
        assert own not in page
        refused = await admin.post(
            own, data={"csrf_token": forms_of(page)[0]["fields"]["csrf_token"]}
        )
        assert refused.status_code == 303
        assert (await admin.get("/admin/users")).status_code == 200


async def test_deactivating_a_user_ends_their_oauth_tokens_but_not_their_api_keys(
    ctx: AppContext, app: Any, client: httpx.AsyncClient, org: Org
) -> None:
    """Tokens act as the person who granted them: they stop at once. A connection's API
    key is the org's: it keeps working although its owner is deactivated."""
    registered = await register_client(ctx, org.admin)
    tokens = await grant(ctx, registered, org.member)
    access = bearer(tokens["access_token"])
    assert (await client.get("/api/v1/me", headers=access)).status_code == 200
    async with browser_client(app) as admin:
        await signed_in(ctx, admin, org.admin)
        user_path = f"/admin/users/{org.member.user_id}"
        deactivated = await post_form(admin, "/admin/users", f"{user_path}/deactivate")
        assert deactivated.status_code == 303

        assert (await client.get("/api/v1/me", headers=access)).status_code == 401
        refresh = {"grant_type": "refresh_token", "refresh_token": tokens["refresh_token"]}
        refused = await token_request(client, registered, refresh)
        assert refused.status_code == 400 and refused.json()["error"] == "invalid_grant"
        introspected = await client.post(
            "/oauth/introspect",
            data={"token": tokens["access_token"]},
            auth=(registered.client_id, registered.client_secret or ""),
        )
        assert introspected.json() == {"active": False}
        # The member's connection (its API key) still works.
        assert (await client.get("/api/v1/me", headers=org.member.headers)).status_code == 200

        # Reactivated, they sign in again, but the tokens stay revoked: a new grant is needed.
        reactivated = await post_form(admin, "/admin/users", f"{user_path}/reactivate")
        assert reactivated.status_code == 303
        assert (await client.get("/api/v1/me", headers=access)).status_code == 401
        assert (await token_request(client, registered, refresh)).status_code == 400


async def test_oauth_client_registered_with_its_secret_then_deleted(
    ctx: AppContext, app: Any, org: Org
) -> None:
    async with browser_client(app) as admin:
        await signed_in(ctx, admin, org.admin)
        registered = await post_form(
            admin,
            "/admin/oauth-clients",
            "/admin/oauth-clients",
            name="Agent desk",
            redirect_uris="https://desk.example.com/cb\nhttp://127.0.0.1:7000/cb",
            kind="confidential",
            connection_id=org.admin.connection_id,
        )
        assert registered.status_code == 200, registered.headers
        client_id = shown(registered.text, "client-id")
        assert len(shown(registered.text, "client-secret")) > 20
        listing = (await admin.get("/admin/oauth-clients")).text
        assert client_id in listing and "https://desk.example.com/cb" in listing
        deleted = await post_form(
            admin, "/admin/oauth-clients", f"/admin/oauth-clients/{client_id}/delete"
        )
        assert deleted.status_code == 303
        assert client_id not in (await admin.get("/admin/oauth-clients")).text

        public = await post_form(
            admin,
            "/admin/oauth-clients",
            "/admin/oauth-clients",
            name="CLI",
            redirect_uris="http://127.0.0.1:7000/cb",
            kind="public",
            connection_id=org.admin.connection_id,
        )
        assert public.status_code == 200 and 'data-testid="client-secret"' not in public.text


async def test_failed_delivery_filtered_shown_and_retried(
    ctx: AppContext, app: Any, client: httpx.AsyncClient, org: Org
) -> None:
    async with Receiver(replies=[Reply(500, b"receiver broke")]) as receiver:
        request = await create_approval(
            client, org.member, title="Ship it", callback_url=receiver.url
        )
        decided = await client.patch(
            f"/api/v1/approvals/{request['id']}",
            json={"decision": "approve"},
            headers=org.admin.headers,
        )
        assert decided.status_code == 200, decided.text
        await receiver.wait_for(1)
        async with browser_client(app) as admin:
            await signed_in(ctx, admin, org.admin)
            failed = (await admin.get("/admin/deliveries", params={"status": "failed"})).text
            assert "Ship it" in failed
            assert (
                "Ship it"
                not in (await admin.get("/admin/deliveries", params={"status": "succeeded"})).text
            )
            link = re.search(r'href="(/admin/deliveries/[0-9a-f-]{36})"', failed)
            assert link
            detail = (await admin.get(link.group(1))).text
            assert "HTTP 500" in detail and "receiver broke" in detail
            retried = await post_form(admin, link.group(1), f"{link.group(1)}/retry")
            assert retried.status_code == 303
            await receiver.wait_for(2)
            after = (await admin.get(link.group(1))).text
            assert "Attempt 2" in after and "Succeeded" in after
    log = await client.get("/api/v1/webhooks", headers=org.admin.headers)
    assert [a["attempt"] for a in log.json()["data"]] == [2, 1]


async def test_emergency_stop_needs_confirmation_says_who_and_cancels(
    ctx: AppContext, app: Any, client: httpx.AsyncClient, org: Org
) -> None:
    request = await create_approval(client, org.member, title="Pending one")
    async with browser_client(app) as admin:
        await signed_in(ctx, admin, org.admin)
        unconfirmed = await post_form(
            admin, "/admin/emergency-stop", "/admin/emergency-stop", confirm=""
        )
        assert unconfirmed.status_code == 303
        assert "is off" in (await admin.get("/admin/emergency-stop")).text
        on = await post_form(
            admin,
            "/admin/emergency-stop",
            "/admin/emergency-stop",
            confirm="yes",
            cancel_pending="yes",
        )
        assert on.status_code == 303
        page = (await admin.get("/admin/emergency-stop")).text
        assert "is on" in page and org.admin.name in page
        blocked = await create_approval_raw(client, org)
        assert blocked.status_code == 503
        read = await client.get(f"/api/v1/approvals/{request['id']}", headers=org.admin.headers)
        assert read.json()["status"] == "cancelled"
        off = await post_form(admin, "/admin/emergency-stop", "/admin/emergency-stop")
        assert off.status_code == 303
        assert "is off" in (await admin.get("/admin/emergency-stop")).text
        assert (await create_approval_raw(client, org)).status_code == 201


async def create_approval_raw(client: httpx.AsyncClient, org: Org) -> httpx.Response:
    from tests.conftest import approval_body

    return await client.post("/api/v1/approvals", json=approval_body(), headers=org.member.headers)


async def test_audit_log_filters_by_type_and_actor(
    ctx: AppContext, app: Any, client: httpx.AsyncClient, org: Org, other_org: Org
) -> None:
    mine = await create_approval(client, org.member, title="Audited")
    await client.patch(
        f"/api/v1/approvals/{mine['id']}", json={"decision": "reject"}, headers=org.admin.headers
    )
    theirs = await create_approval(client, other_org.member, title="Not yours")
    async with browser_client(app) as admin:
        await signed_in(ctx, admin, org.admin)
        everything = (await admin.get("/admin/audit")).text
        assert f"/requests/{mine['id']}" in everything
        assert f"/requests/{theirs['id']}" not in everything
        # The type filter offers the types this org's log holds, in order.
        offered = re.findall(r'<option value="([a-z_.]+)"', everything.split('name="type"')[1])
        assert offered == sorted(offered)
        assert {"request.created", "request.rejected", "user.invited"} <= set(offered)
        by_admin = (await admin.get("/admin/audit", params={"actor_id": org.admin.user_id})).text
        assert (
            f"/requests/{mine['id']}" in by_admin
            and "request.created" not in by_admin.split("<tbody>")[1]
        )
        bad = await admin.get("/admin/audit", params={"since": "yesterday"})
        assert bad.status_code == 200 and "must be a date" in bad.text


async def test_admin_overrides_a_chain_where_they_hold_a_step(
    ctx: AppContext, app: Any, client: httpx.AsyncClient, org: Org
) -> None:
    request = await create_approval(client, org.member, title="Chained", is_sequential=True)
    approvers = (org.admin, org.members[1])
    steps = [{"approver_id": m.user_id, "step_order": i + 1} for i, m in enumerate(approvers)]
    configured = await client.post(
        f"/api/v1/approvals/{request['id']}/steps",
        json={"steps": steps},
        headers=org.admin.headers,
    )
    assert configured.status_code == 201, configured.text
    async with browser_client(app) as admin, browser_client(app, "203.0.113.8") as member:
        await signed_in(ctx, member, org.members[1])
        assert (
            f"/requests/{request['id']}/override"
            not in (await member.get(f"/requests/{request['id']}")).text
        )
        await signed_in(ctx, admin, org.admin)
        page_url = f"/requests/{request['id']}"
        forced = await post_form(
            admin, page_url, f"{page_url}/override", decision="reject", comment="Not today"
        )
        assert forced.status_code == 303
    read = await client.get(f"/api/v1/approvals/{request['id']}", headers=org.admin.headers)
    assert read.json()["status"] == "rejected"
    assert read.json()["decision_comment"] == "Not today"
