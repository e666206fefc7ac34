"""Errors a browser meets are pages of the product; programs keep the JSON envelope.

A browser (Accept names text/html) that opens a wrong address outside the API gets the
layout, with the navigation when signed in; the API, ``/mcp`` and the OAuth endpoints
that answer JSON answer JSON whatever the Accept header says.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from signoff.context import AppContext
from signoff.dashboard.error_pages import prefers_html
from tests.conftest import Org, assert_error
from tests.dashboard.support import signed_in
from tests.helpers import NO_SWEEP

BROWSER = {"Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}
JSON = {"Accept": "application/json"}
NAVIGATION = 'aria-label="Main"'


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    return NO_SWEEP


@pytest.fixture
async def signed_in_admin(
    ctx: AppContext, client: httpx.AsyncClient, org: Org
) -> httpx.AsyncClient:
    await signed_in(ctx, client, org.admin)
    return client


def assert_page(response: httpx.Response, status: int, heading: str) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("text/html"), response.text
    assert f">{heading}</h1>" in response.text, response.text
    assert response.headers["content-security-policy"].startswith("default-src 'none'")


# ---- pages for browsers ----


async def test_a_signed_in_browser_gets_a_404_page_with_the_navigation(
    signed_in_admin: httpx.AsyncClient,
) -> None:
    page = await signed_in_admin.get("/no-such-page", headers=BROWSER)
    assert_page(page, 404, "Page not found")
    assert NAVIGATION in page.text and "Sign out" in page.text
    assert 'href="/">Go to the inbox' in page.text
    assert "Error 404" in page.text


async def test_a_signed_out_browser_gets_the_layout_without_the_navigation(
    client: httpx.AsyncClient,
) -> None:
    page = await client.get("/no-such-page", headers=BROWSER)
    assert_page(page, 404, "Page not found")
    assert NAVIGATION not in page.text and "Sign out" not in page.text
    assert 'class="topbar topbar-guest"' in page.text and 'href="/signin"' in page.text


async def test_a_program_keeps_the_json_envelope_outside_the_api_too(
    signed_in_admin: httpx.AsyncClient,
) -> None:
    for headers in (JSON, {"Accept": "*/*"}, {}):
        assert_error(await signed_in_admin.get("/no-such-page", headers=headers), 404, "NOT_FOUND")


async def test_a_wrong_method_is_a_405_page_that_names_the_allowed_ones(
    signed_in_admin: httpx.AsyncClient,
) -> None:
    page = await signed_in_admin.delete("/history", headers=BROWSER)
    assert_page(page, 405, "Not available here")
    assert page.headers["allow"] == "GET"
    assert NAVIGATION in page.text
    answer = await signed_in_admin.delete("/history", headers=JSON)
    assert_error(answer, 405, "METHOD_NOT_ALLOWED")


async def test_admin_opens_the_first_admin_page(
    signed_in_admin: httpx.AsyncClient, client: httpx.AsyncClient
) -> None:
    for path in ("/admin", "/admin/"):
        answer = await signed_in_admin.get(path, headers=BROWSER)
        assert answer.status_code == 303 and answer.headers["location"] == "/admin/connections"
    page = await signed_in_admin.get("/admin", headers=BROWSER, follow_redirects=True)
    assert page.status_code == 200 and "Connections" in page.text


async def test_admin_is_a_403_page_for_a_member_and_a_sign_in_for_a_visitor(
    ctx: AppContext, app: Any, org: Org
) -> None:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://signoff.test") as visitor:
        answer = await visitor.get("/admin", headers=BROWSER)
        assert answer.status_code == 303 and answer.headers["location"] == "/signin?next=%2Fadmin"
        await signed_in(ctx, visitor, org.member)
        page = await visitor.get("/admin", headers=BROWSER)
        assert_page(page, 403, "Admins only")
        assert NAVIGATION in page.text and 'href="/admin"' not in page.text


async def test_the_favicon_is_served_by_the_app(client: httpx.AsyncClient) -> None:
    icon = await client.get("/favicon.ico", headers=BROWSER)
    assert icon.status_code == 200
    assert icon.headers["content-type"] == "image/x-icon"
    assert icon.content[:4] == b"\x00\x00\x01\x00"  # an ICO file's header
    assert 0 < len(icon.content) < 10_000


# ---- a fault of the server ----


@pytest.fixture
async def faulty(app: Any) -> AsyncIterator[httpx.AsyncClient]:
    """The app with a page and an API route that fail unexpectedly."""

    async def broken() -> None:
        raise RuntimeError("a bug")

    app.add_api_route("/reports/broken", broken, include_in_schema=False)
    app.add_api_route("/api/v1/broken", broken, include_in_schema=False)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://signoff.test") as http:
        yield http


async def test_a_server_fault_is_a_500_page_that_tells_nothing_of_the_bug(
    faulty: httpx.AsyncClient, org: Org
) -> None:
    page = await faulty.get("/reports/broken", headers=BROWSER)
    assert_page(page, 500, "Something went wrong")
    assert "a bug" not in page.text and "RuntimeError" not in page.text
    assert_error(await faulty.get("/reports/broken", headers=JSON), 500, "INTERNAL_ERROR")
    api_call = await faulty.get("/api/v1/broken", headers={**BROWSER, **org.admin.headers})
    assert_error(api_call, 500, "INTERNAL_ERROR")


# ---- what programs call never turns into a page ----


@pytest.mark.parametrize(
    ("method", "path", "status", "code"),
    [
        ("GET", "/api/v1/no-such-thing", 404, "NOT_FOUND"),
        ("GET", "/api/v1/approvals/not-an-id", 404, "NOT_FOUND"),
        ("DELETE", "/api/v1/approvals", 405, "METHOD_NOT_ALLOWED"),
        ("GET", "/api", 404, "NOT_FOUND"),
        ("GET", "/oauth/token", 405, "METHOD_NOT_ALLOWED"),
        ("GET", "/oauth/revoke", 405, "METHOD_NOT_ALLOWED"),
        ("GET", "/.well-known/no-such-document", 404, "NOT_FOUND"),
        ("GET", "/integrations/slack/interactions", 405, "METHOD_NOT_ALLOWED"),
        ("POST", "/healthz", 405, "METHOD_NOT_ALLOWED"),
    ],
)
async def test_the_api_and_oauth_json_endpoints_answer_json_to_a_browser(
    signed_in_admin: httpx.AsyncClient, org: Org, method: str, path: str, status: int, code: str
) -> None:
    """With the session's cookie and an API key: a browser's tab, or a script that sends
    a browser's Accept header."""
    headers = {**BROWSER, **org.admin.headers}
    assert_error(await signed_in_admin.request(method, path, headers=headers), status, code)


async def test_the_api_without_a_key_answers_json_to_a_browser(
    signed_in_admin: httpx.AsyncClient,
) -> None:
    answer = await signed_in_admin.get("/api/v1/no-such-thing", headers=BROWSER)
    assert_error(answer, 401, "UNAUTHORIZED")


async def test_mcp_is_unaffected_by_the_browser_s_accept_header(
    signed_in_admin: httpx.AsyncClient,
) -> None:
    for method in ("GET", "DELETE", "PUT"):
        for where in ("/mcp", "/mcp/no-such-thing"):
            as_browser = await signed_in_admin.request(method, where, headers=BROWSER)
            as_program = await signed_in_admin.request(method, where, headers=JSON)
            assert as_browser.status_code == as_program.status_code, where
            assert not as_browser.headers.get("content-type", "").startswith("text/html")
            assert "<html" not in as_browser.text


# ---- the Accept header ----


@pytest.mark.parametrize(
    ("accept", "page"),
    [
        (BROWSER["Accept"], True),
        ("text/html", True),
        ("TEXT/HTML; charset=utf-8", True),
        ("application/json, text/html;q=0.5", False),
        ("text/html;q=0.9, application/json;q=0.9", True),
        ("text/html;q=0", False),
        ("text/html;q=oops", False),
        ("application/json", False),
        ("*/*", False),
        ("", False),
    ],
)
def test_a_page_is_for_an_accept_header_that_names_html_first(accept: str, page: bool) -> None:
    assert prefers_html(accept) is page
