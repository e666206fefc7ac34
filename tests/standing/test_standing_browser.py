""" "Don't ask again" in a real browser (Debian's Chromium through Playwright) against a
live server: chosen beside an approval on the request's page, then listed and revoked on
/standing-approvals; accessible, with screenshots at desktop and phone width."""

from __future__ import annotations

from typing import Any

import pytest

from tests.browser import DESKTOP, PHONE, Site, assert_accessible, browser, screenshot, sign_in
from tests.helpers import NO_SWEEP
from tests.standing.support import DEPLOY

pytestmark = pytest.mark.anyio


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    return dict(NO_SWEEP)


async def test_dont_ask_again_then_revoke(site: Site, chromium: str) -> None:
    from playwright.async_api import expect

    requester, approver = site.org.members[0], site.org.members[1]
    created = await site.create(requester, **DEPLOY)
    async with browser(chromium) as chrome:
        page = await chrome.new_page(viewport=DESKTOP)
        await sign_in(page, site.url, approver)
        await page.goto(f"{site.url}/requests/{created['id']}")
        await page.get_by_text("Don't ask again").click()
        await page.get_by_label("For").select_option("86400")
        await page.get_by_label("At most this many requests").fill("5")
        await page.get_by_label("Only with these same arguments").check()
        await assert_accessible(page)
        await screenshot(page, "standing-request-desktop")
        await page.get_by_role("button", name="Approve").click()
        await expect(page.get_by_text("You approved this request.")).to_be_visible()
        matched = await site.create(requester, **DEPLOY)
        assert matched["status"] == "approved" and matched["standing_approval_id"]

        await page.goto(f"{site.url}/standing-approvals")
        await expect(page.get_by_text("1 of 5")).to_be_visible()
        await assert_accessible(page)
        await screenshot(page, "standing-list-desktop")
        await page.set_viewport_size(PHONE)
        await assert_accessible(page)
        await screenshot(page, "standing-list-phone")
        await page.get_by_role("button", name="Revoke").click()
        await expect(
            page.get_by_text("Revoked: those requests go to people again.")
        ).to_be_visible()
        await expect(page.get_by_text("Nothing stands")).to_be_visible()
    again = await site.create(requester, **DEPLOY)
    assert again["status"] == "pending"
