"""OpenID CIBA end to end in headless Chromium: an agent asks over /oauth/bc-authorize, the
person approves on the request's page, and the polling client (httpx, as CIBA core section
10.1 describes) gets the token; and the dashboard's registration form, looked at."""

from __future__ import annotations

from typing import Any

import pytest

from signoff.context import AppContext
from tests.browser import DESKTOP, PHONE, Site, assert_accessible, browser, screenshot, sign_in
from tests.helpers import NO_SWEEP
from tests.oauth.test_ciba import DETAILS, bc_authorize, poll, register

pytestmark = pytest.mark.slow


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    return {**NO_SWEEP, "ciba_interval_seconds": 0}


async def test_a_person_approves_in_the_browser_and_the_poll_gets_the_token(
    ctx: AppContext, site: Site, chromium: str
) -> None:
    from playwright.async_api import expect

    person = site.org.members[1]
    agent = await register(ctx, site.org.members[0])
    started = await bc_authorize(site.api, agent, person, binding_message="Pay ACME 123.50 EUR")
    assert started.status_code == 200, started.text
    auth_req_id = started.json()["auth_req_id"]
    pending = await poll(site.api, agent, auth_req_id)
    assert pending.json()["error"] == "authorization_pending"
    async with browser(chromium) as chrome:
        page = await chrome.new_page(viewport=DESKTOP)
        await sign_in(page, site.url, person)
        await page.goto(f"{site.url}/requests/{auth_req_id}")
        await expect(page.get_by_role("heading", name="Pay ACME 123.50 EUR")).to_be_visible()
        await page.get_by_role("button", name="Approve", exact=True).click()
        await expect(page.locator(".decide-card")).to_contain_text("approved", ignore_case=True)
    answer = await poll(site.api, agent, auth_req_id)
    assert answer.status_code == 200, answer.text
    assert answer.json()["authorization_details"] == DETAILS
    assert answer.json()["user_email"] == person.email


async def test_the_registration_form(site: Site, chromium: str) -> None:
    async with browser(chromium) as chrome:
        page = await chrome.new_page(viewport=DESKTOP)
        await sign_in(page, site.url, site.org.admin)
        await page.goto(f"{site.url}/admin/oauth-clients")
        await assert_accessible(page)
        await screenshot(page, "ciba-clients-desktop")
        await page.set_viewport_size(PHONE)
        await screenshot(page, "ciba-clients-phone")
