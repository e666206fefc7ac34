"""Edit and approve on a chain with group steps in Chromium, on SQLite and PostgreSQL: a
member of finance edits in the browser after votes on both group steps; the diff page
names the request's chain and fits a phone; once confirmed, the page says the edit
counted as their approval and whose votes it dismissed. Screenshots of the diff at
desktop and phone widths go to test-artifacts/group-edit-*.png."""

from __future__ import annotations

from typing import Any

import pytest

from tests.browser import DESKTOP, PHONE, Site, assert_accessible, browser, screenshot, sign_in
from tests.groups.test_group_edits import group_chain
from tests.steps.test_group_steps import make_group
from tests.steps.test_steps import vote

pytestmark = pytest.mark.anyio


async def _page_overflows(page: Any) -> bool:
    overflow: bool = await page.evaluate(
        "document.documentElement.scrollWidth > document.documentElement.clientWidth"
    )
    return overflow


async def test_edit_a_group_step_in_the_browser(site: Site, chromium: str) -> None:
    from playwright.async_api import expect

    org, api = site.org, site.api
    ann, ben, sam = org.members[:3]
    groups = (
        await make_group(api, org, "Finance", [ann, ben]),
        await make_group(api, org, "Security", [sam]),
    )
    request_id, fin, sec = await group_chain(api, org, groups)
    assert (await vote(api, ann, request_id, fin["id"])).status_code == 200
    assert (await vote(api, sam, request_id, sec["id"])).status_code == 200

    async with browser(chromium) as chrome:
        page = await chrome.new_page(viewport=DESKTOP)
        await sign_in(page, site.url, ben)
        await page.goto(f"{site.url}/requests/{request_id}")
        await page.get_by_role("link", name="Edit and approve").click()
        await page.get_by_label("replicas").fill("5")
        await page.get_by_role("button", name="Review changes").click()
        await expect(page.get_by_role("heading", name="Confirm your edit")).to_be_visible()
        await expect(page.locator("ins.arg-new", has_text="5")).to_be_visible()
        await expect(
            page.get_by_text(f"The earlier votes of {ann.name}, {sam.name}")
        ).to_be_visible()
        await assert_accessible(page)
        await screenshot(page, "group-edit-diff-desktop")
        await page.set_viewport_size(PHONE)
        assert not await _page_overflows(page)
        await screenshot(page, "group-edit-diff-phone")
        await page.get_by_role("button", name="Approve with these arguments").click()
        await expect(page.get_by_text("You edited the arguments.")).to_be_visible()
        await expect(page.get_by_text("Votes dismissed, and asked again")).to_be_visible()
        assert not await _page_overflows(page)
        await screenshot(page, "group-edit-done-phone")
    body = await site.read(request_id)
    assert body["status"] == "pending" and body["arguments"]["replicas"] == 5
