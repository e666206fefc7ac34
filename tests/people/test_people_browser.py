"""Four-eyes and out of office in Chromium, at desktop and phone widths: the requester
sees no buttons and why; the settings and account pages pass axe-core. Screenshots go to
test-artifacts/people-*.png."""

from __future__ import annotations

from datetime import timedelta

import pytest

from signoff.common.time import format_timestamp, utcnow
from tests.browser import DESKTOP, PHONE, Site, assert_accessible, browser, screenshot, sign_in
from tests.people.test_self_approval import settings_doc

pytestmark = pytest.mark.anyio


async def test_the_requester_sees_no_buttons_and_the_pages_read_well(
    site: Site, chromium: str
) -> None:
    from playwright.async_api import expect

    ann, bob = site.org.members[0], site.org.members[1]
    forbid = await site.api.patch(
        "/api/v1/org/settings",
        headers=site.org.admin.headers,
        json={"self_approval": "forbid"},
    )
    assert forbid.status_code == 200, forbid.text
    request = await site.create(ann, title="Deploy billing v2")
    away = await site.api.put(
        "/api/v1/me/delegation",
        headers=ann.headers,
        json={
            "away_until": format_timestamp(utcnow() + timedelta(days=5)),
            "delegate_id": bob.user_id,
        },
    )
    assert away.status_code == 200, away.text
    async with browser(chromium) as chrome:
        page = await chrome.new_page(viewport=DESKTOP)
        await sign_in(page, site.url, ann)
        await page.goto(f"{site.url}/requests/{request['id']}")
        await expect(page.get_by_text("requires a second person")).to_be_visible()
        assert await page.get_by_role("button", name="Approve").count() == 0
        assert await page.get_by_role("button", name="Reject").count() == 0
        await assert_accessible(page)
        await screenshot(page, "people-own-request-desktop")
        await page.set_viewport_size(PHONE)
        await screenshot(page, "people-own-request-phone")
        await page.set_viewport_size(DESKTOP)
        await page.goto(f"{site.url}/account")
        await expect(page.get_by_role("heading", name="Out of office")).to_be_visible()
        await expect(page.get_by_text("You are away from")).to_be_visible()
        await assert_accessible(page)
        await screenshot(page, "people-account-desktop")
        await page.set_viewport_size(PHONE)
        await screenshot(page, "people-account-phone")

        admin = await chrome.new_page(viewport=DESKTOP)
        await sign_in(admin, site.url, site.org.admin)
        await admin.goto(f"{site.url}/requests/{request['id']}")
        await expect(admin.get_by_role("button", name="Approve")).to_be_visible()
        await admin.goto(f"{site.url}/admin/settings")
        await expect(admin.get_by_label("A second person", exact=False)).to_be_checked()
        await assert_accessible(admin)
        await screenshot(admin, "people-settings-desktop")
        await admin.set_viewport_size(PHONE)
        await screenshot(admin, "people-settings-phone")
        await admin.get_by_label("Anyone who may approve", exact=False).check()
        await admin.get_by_role("button", name="Save settings").click()
        await expect(admin.get_by_text("Settings saved.")).to_be_visible()
    read = await site.api.get("/api/v1/org/settings", headers=ann.headers)
    assert read.json() == settings_doc("allow", "off")
