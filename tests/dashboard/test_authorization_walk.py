"""Every dashboard route, walked as nobody, a member, an admin and another org's admin.

The routes are read from the dashboard's router, so a page added later is walked too:
give its path parameters a value in ``PATH_VALUES`` and, for admin pages, list it in
``ADMIN_ONLY``.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

import httpx
import pytest
from fastapi.routing import APIRoute

from signoff.context import AppContext
from signoff.dashboard.admin import router as admin_router
from signoff.dashboard.endpoints import router
from tests.conftest import Org, create_approval
from tests.dashboard.support import browser_client, csrf_of, signed_in
from tests.helpers import NO_SWEEP
from tests.oauth.support import grant, register_client

# Open to anyone: the sign-in and first-run pages, and the static files.
PUBLIC = {"/signin", "/signout", "/setup/{token}", "/static/{name}", "/favicon.ico"}
# Pages only admins may open: every route of dashboard/admin.py, and /admin (a redirect
# to the first of them).
ADMIN_ONLY: set[str] = {
    "/admin",
    *(route.path for route in admin_router.routes if isinstance(route, APIRoute)),
}
REDIRECTS = {"/admin"}
STATIC_NAME = "app.css"


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    return NO_SWEEP


def _routes() -> list[tuple[str, str]]:
    found = []
    for route in [*router.routes, *admin_router.routes]:
        assert isinstance(route, APIRoute)
        for method in sorted(route.methods):
            found.append((method, route.path))
    return found


def _url(path: str, values: dict[str, str]) -> str:
    return re.sub(r"\{(\w+)\}", lambda m: values[m.group(1)], path)


async def _call(http: httpx.AsyncClient, method: str, url: str) -> httpx.Response:
    if method == "GET":
        return await http.get(url)
    page = await http.get("/account")
    token = csrf_of(page.text) if page.status_code == 200 else "none"
    return await http.post(url, data={"csrf_token": token, "decision": "approve", "body": "x"})


async def test_every_route_checks_org_and_role(
    ctx: AppContext, app: Any, client: httpx.AsyncClient, org: Org, other_org: Org
) -> None:
    # With a schema, so that its Edit and approve page opens too.
    request = await create_approval(
        client,
        org.admin,
        title="Acme secret plan",
        arguments={"n": 1},
        arguments_schema={"type": "object", "properties": {"n": {"type": "integer"}}},
    )
    oauth_client = await register_client(ctx, org.member)
    await grant(ctx, oauth_client, org.member)
    delivery_id = await _a_delivery(ctx, client, org)
    values = {
        "request_id": request["id"],
        "client_id": oauth_client.client_id,
        "token": "not-a-setup-token",
        "name": STATIC_NAME,
        "connection_id": org.member.connection_id,
        "user_id": org.members[2].user_id,
        "delivery_id": delivery_id,
    }
    routes = _routes()
    assert ("GET", "/") in routes and ("POST", "/requests/{request_id}/decision") in routes

    # Nobody signed in: every page but the public ones sends to the sign-in page.
    async with browser_client(app) as anonymous:
        for method, path in routes:
            if path in PUBLIC:
                continue
            answer = await _call(anonymous, method, _url(path, values))
            assert answer.status_code in (303, 403), (method, path, answer.status_code)
            if method == "GET":
                assert answer.headers["location"].startswith("/signin?next="), path

    # Another org's admin: nothing of Acme's, by any route.
    async with browser_client(app) as stranger:
        await signed_in(ctx, stranger, other_org.admin)
        for method, path in routes:
            if path in PUBLIC or path == "/live":
                continue  # the stream is the org's own: opened by the browser tests
            answer = await _call(stranger, method, _url(path, values))
            if "{" in path:
                assert answer.status_code == 404, (method, path, answer.status_code)
            else:
                assert answer.status_code in (200, 303), (method, path, answer.status_code)
            assert "Acme secret plan" not in answer.text, (method, path)
        assert "Acme secret plan" not in (await stranger.get("/history.csv")).text

    # A member and an admin of Acme: every page opens, admin pages for admins only.
    for person in (org.members[1], org.admin):
        async with browser_client(app) as http:
            await signed_in(ctx, http, person)
            for method, path in routes:
                if method != "GET" or path in PUBLIC - {"/static/{name}"} or path == "/live":
                    continue
                answer = await http.get(_url(path, values))
                expected = 403 if path in ADMIN_ONLY and person.role != "admin" else 200
                if expected == 200 and path in REDIRECTS:
                    expected = 303
                assert answer.status_code == expected, (person.role, path, answer.status_code)
            if person.role != "admin":
                # A member's POST to an admin action is refused before it does anything.
                for method, path in routes:
                    if method == "POST" and path in ADMIN_ONLY:
                        answer = await _call(http, method, _url(path, values))
                        assert answer.status_code == 403, (path, answer.status_code)
            page = await http.get(f"/requests/{request['id']}")
            assert "Acme secret plan" in page.text

    read = await client.get(f"/api/v1/approvals/{request['id']}", headers=org.admin.headers)
    assert read.json()["status"] == "pending" and read.json()["comments_count"] == 0
    me = await client.get("/api/v1/me", headers=org.member.headers)
    assert me.status_code == 200 and me.json()["rate_limit"]["limit"] != 0  # not revoked
    async with ctx.reading() as uow:
        org_row = await uow.orgs.get_org(uuid.UUID(org.id))
        target = await uow.orgs.find_user(uuid.UUID(org.members[2].user_id))
    assert org_row is not None and not org_row.emergency_stop
    assert target is not None and target.deactivated_at is None and target.role == "member"


async def _a_delivery(ctx: AppContext, client: httpx.AsyncClient, org: Org) -> str:
    """A decided request's callback to a closed port: one delivery row of Acme's."""
    decided = await create_approval(
        client, org.admin, title="Decided one", callback_url="http://127.0.0.1:9/hook"
    )
    answer = await client.patch(
        f"/api/v1/approvals/{decided['id']}",
        json={"decision": "approve"},
        headers=org.admin.headers,
    )
    assert answer.status_code == 200, answer.text
    async with ctx.reading() as uow:
        deliveries = await uow.webhooks.list_deliveries(uuid.UUID(decided["id"]))
    assert deliveries
    return str(deliveries[0].id)
