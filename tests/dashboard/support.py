"""Helpers of the dashboard tests: a person signed in over HTTP, forms read from pages."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlencode

import httpx

from signoff.context import AppContext
from tests.conftest import Member
from tests.oauth.support import PASSWORD, forms_of, give_password

CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


def csrf_of(html: str) -> str:
    found = CSRF.search(html)
    assert found, "no CSRF token on the page"
    return found.group(1)


async def sign_in(
    http: httpx.AsyncClient, email: str, password: str = PASSWORD, next_url: str = "/"
) -> httpx.Response:
    page = await http.get("/signin", params={"next": next_url})
    assert page.status_code == 200, page.text
    return await http.post(
        "/signin",
        data={
            "csrf_token": csrf_of(page.text),
            "email": email,
            "password": password,
            "next": next_url,
        },
    )


async def signed_in(ctx: AppContext, http: httpx.AsyncClient, member: Member) -> None:
    await give_password(ctx, member)
    response = await sign_in(http, member.email)
    assert response.status_code == 303, response.text
    assert response.headers["location"] == "/"


async def choose_own_password(
    http: httpx.AsyncClient, password: str, next_url: str = "/"
) -> httpx.Response:
    """After signing in with a password an admin generated: the page that asks for the
    person's own, submitted."""
    return await post_form(
        http,
        "/account/choose-password?" + urlencode({"next": next_url}),
        "/account/choose-password",
        new_password=password,
        repeat_password=password,
    )


def browser_client(app: Any, address: str = "203.0.113.7") -> httpx.AsyncClient:
    """Another browser: its own cookies (and address, for the throttling tests)."""
    transport = httpx.ASGITransport(app=app, client=(address, 50000))
    return httpx.AsyncClient(transport=transport, base_url="http://signoff.test")


async def post_form(
    http: httpx.AsyncClient, page_url: str, action: str, **fields: str
) -> httpx.Response:
    """Submit a form of a page as a browser would: with the page's hidden fields."""
    page = await http.get(page_url)
    assert page.status_code == 200, page.text
    form = next(f for f in forms_of(page.text) if f["action"] == action)
    return await http.post(action, data={**form["fields"], **fields})


__all__ = [
    "PASSWORD",
    "browser_client",
    "choose_own_password",
    "csrf_of",
    "post_form",
    "sign_in",
    "signed_in",
]
