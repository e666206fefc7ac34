"""The main navigation at phone and desktop widths, in Chromium: every item in view (the
bar wraps on a phone rather than cutting the last ones off), with and without script.
Screenshots of the inbox and the settings page under test-artifacts/."""

from __future__ import annotations

from typing import Any

import pytest

from tests.browser import DESKTOP, PHONE, Site, browser, screenshot, sign_in

pytestmark = pytest.mark.anyio

# An admin sees every item of the bar.
ITEMS = ["Inbox", "History", "Standing", "Admin", "Account"]
PAGES = {"inbox": "/", "settings": "/admin/settings"}


async def nav_boxes(page: Any) -> list[dict[str, Any]]:
    """Each main-navigation link's text and box, and the viewport's width."""
    found: list[dict[str, Any]] = await page.evaluate(
        """() => [...document.querySelectorAll('nav[aria-label="Main"] a')].map(a => {
            const r = a.getBoundingClientRect();
            const hit = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
            return {text: a.textContent.trim(), left: r.left, right: r.right, top: r.top,
                    bottom: r.bottom, width: document.documentElement.clientWidth,
                    scroll: document.documentElement.scrollWidth,
                    on_top: a.contains(hit)};
        })"""
    )
    return found


def assert_all_in_view(boxes: list[dict[str, Any]], where: str) -> None:
    assert [b["text"].split()[0] for b in boxes] == ITEMS, where
    for box in boxes:
        assert box["left"] >= 0 and box["right"] <= box["width"], f"{where}: {box}"
        assert box["on_top"], f"{where}: {box['text']} is covered"
        assert box["scroll"] <= box["width"], f"{where}: the page scrolls sideways"


@pytest.mark.parametrize("script", [True, False], ids=["js", "nojs"])
async def test_every_nav_item_is_in_view_at_phone_and_desktop_widths(
    site: Site, chromium: str, script: bool
) -> None:
    for n in range(12):  # a two-digit waiting count in the bar
        await site.create(site.org.members[0], title=f"Deploy {n}")
    async with browser(chromium) as chrome:
        for size_name, size in (("phone", PHONE), ("desktop", DESKTOP)):
            context = await chrome.new_context(viewport=size, java_script_enabled=script)
            page = await context.new_page()
            await sign_in(page, site.url, site.org.admin)
            for page_name, path in PAGES.items():
                await page.goto(site.url + path)
                where = f"{page_name} at {size['width']} px"
                assert_all_in_view(await nav_boxes(page), where)
                if script:
                    await screenshot(page, f"nav-{page_name}-{size_name}")
            boxes = await nav_boxes(page)
            rows = {round(b["top"]) for b in boxes}
            if size is DESKTOP:
                assert len(rows) == 1, "one row on a desktop"
            else:
                assert len(rows) <= 2, "at most two rows on a phone"
            await context.close()
