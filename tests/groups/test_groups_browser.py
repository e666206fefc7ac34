"""The groups page in a real browser (Debian's Chromium through Playwright) against a live
server, with JavaScript off (plain forms): create with members, add, remove, rename, a
taken name refused, delete after confirming; axe checks and screenshots at desktop and
phone width (with JavaScript, which axe needs). Members are refused the page."""

from __future__ import annotations

from typing import Any

import pytest

from tests.browser import DESKTOP, PHONE, Site, assert_accessible, browser, screenshot, sign_in
from tests.helpers import NO_SWEEP

pytestmark = pytest.mark.anyio


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    return dict(NO_SWEEP)


async def test_admin_manages_groups_without_javascript(site: Site, chromium: str) -> None:
    from playwright.async_api import expect

    admin = site.org.admin
    one, two, three = site.org.members
    async with browser(chromium) as chrome:
        context = await chrome.new_context(viewport=DESKTOP, java_script_enabled=False)
        page = await context.new_page()
        await sign_in(page, site.url, admin)
        await page.goto(f"{site.url}/groups")
        assert page.url.endswith("/admin/groups")
        tabs = page.get_by_role("navigation", name="Admin")
        await expect(tabs.get_by_role("link", name="Groups")).to_have_attribute(
            "aria-current", "page"
        )
        await expect(page.locator("#no-groups")).to_be_visible()
        await page.get_by_label("Name", exact=True).fill("Finance")
        await page.locator(f"#new-member-{one.user_id}").check()
        await page.locator(f"#new-member-{two.user_id}").check()
        await page.get_by_role("button", name="Create group").click()
        await expect(page.get_by_text("Group Finance created with 2 members.")).to_be_visible()
        await page.locator("#new-group summary").click()
        await page.get_by_label("Name", exact=True).fill("Security")
        await page.get_by_role("button", name="Create group").click()
        await expect(page.get_by_text("Group Security created with 0 members.")).to_be_visible()

        await page.get_by_label("Person to add to Finance").select_option(three.user_id)
        await page.get_by_role("button", name="Add to Finance").click()
        await expect(page.get_by_text("Finance now has 3 members.")).to_be_visible()
        await page.get_by_role("button", name=f"Remove {one.name} from Finance").click()
        await expect(page.get_by_text("Member removed from Finance.")).to_be_visible()
        await page.get_by_label("Person to add to Security").select_option(one.user_id)
        await page.get_by_role("button", name="Add to Security").click()

        await page.get_by_label("New name of Security").fill("finance")
        await page.get_by_role("button", name="Rename Security").click()
        await expect(page.get_by_text("A group named 'Finance' already exists.")).to_be_visible()
        await page.get_by_label("New name of Security").fill("Security operations")
        await page.get_by_role("button", name="Rename Security").click()
        await expect(page.get_by_text("Group renamed to Security operations.")).to_be_visible()

        card = page.locator("section.group-card", has_text="Security operations")
        await card.locator("summary", has_text="Delete").click()
        await card.get_by_role("button", name="Delete", exact=True).click()
        await expect(page.get_by_text("Group Security operations deleted.")).to_be_visible()
        await context.close()

        # axe runs in the page: a context with JavaScript, on the page as it is left.
        checked = await chrome.new_context(viewport=DESKTOP)
        page = await checked.new_page()
        await sign_in(page, site.url, admin)
        await page.goto(f"{site.url}/admin/groups")
        await assert_accessible(page)
        await screenshot(page, "groups-desktop")
        await page.set_viewport_size(PHONE)
        await assert_accessible(page)
        await screenshot(page, "groups-phone")
        await checked.close()

        member_page = await chrome.new_page(viewport=PHONE)
        await sign_in(member_page, site.url, one)
        refused = await member_page.goto(f"{site.url}/admin/groups")
        assert refused is not None and refused.status == 403

    listed = await site.api.get("/api/v1/groups", headers=admin.headers)
    (finance,) = listed.json()["data"]
    assert finance["name"] == "Finance" and finance["member_count"] == 2
    read = await site.api.get(f"/api/v1/groups/{finance['id']}", headers=admin.headers)
    assert {m["id"] for m in read.json()["members"]} == {two.user_id, three.user_id}
