"""Request previews in Chromium at desktop and phone widths: each kind is shown as meant,
passes axe-core, and long lines scroll inside the preview box, never the page.
Screenshots of each go to test-artifacts/preview-<kind>-<width>.png."""

from __future__ import annotations

from typing import Any

import pytest

from tests.approvals.preview_samples import HOSTILE, SAMPLES
from tests.browser import (
    ARTIFACTS,
    DESKTOP,
    PHONE,
    Site,
    assert_accessible,
    browser,
    screenshot,
    sign_in,
)

pytestmark = pytest.mark.anyio

# What each kind's box shows when it is rendered as that kind.
RENDERED = {
    "text": "pre.preview-text",
    "markdown": ".preview-markdown table",
    "diff": "table.diff tr.diff-add",
    "sql": ".preview-sql .tok-k",
    "json": ".json-tree details",
    "email": ".email-headers",
}


async def _page_overflows(page: Any) -> bool:
    overflow: bool = await page.evaluate(
        "document.documentElement.scrollWidth > document.documentElement.clientWidth"
    )
    return overflow


async def test_every_kind_of_preview_at_desktop_and_phone_width(site: Site, chromium: str) -> None:
    from playwright.async_api import expect

    member = site.org.members[0]
    created = {
        kind: await site.create(
            site.org.admin,
            title=f"Preview: {kind}",
            preview={"kind": kind, "content": content},
        )
        for kind, content in SAMPLES.items()
    }
    async with browser(chromium) as chrome:
        page = await chrome.new_page(viewport=DESKTOP)
        dialogs: list[str] = []
        page.on("dialog", lambda dialog: dialogs.append(dialog.message))
        await sign_in(page, site.url, member)
        for kind, request in created.items():
            await page.set_viewport_size(DESKTOP)
            await page.goto(f"{site.url}/requests/{request['id']}")
            preview = page.locator(f'section[data-preview-kind="{kind}"]')
            await expect(preview.get_by_role("heading", name="Preview")).to_be_visible()
            await expect(preview.locator(RENDERED[kind]).first).to_be_visible()
            await expect(preview.get_by_text(request["preview_hash"])).to_be_visible()
            await assert_accessible(page)
            await screenshot(page, f"preview-{kind}-desktop")
            await preview.screenshot(path=str(ARTIFACTS / f"preview-{kind}-desktop-box.png"))
            await page.set_viewport_size(PHONE)
            assert not await _page_overflows(page), f"{kind}: the page scrolls sideways"
            await screenshot(page, f"preview-{kind}-phone")
            await preview.screenshot(path=str(ARTIFACTS / f"preview-{kind}-phone-box.png"))
        # The diff's long line scrolls inside its box on a phone.
        await page.goto(f"{site.url}/requests/{created['diff']['id']}")
        scrolls = await page.locator(".preview-scroll").evaluate(
            "box => box.scrollWidth > box.clientWidth"
        )
        assert scrolls
        assert dialogs == []


async def test_hostile_previews_run_nothing_in_the_browser(site: Site, chromium: str) -> None:
    from playwright.async_api import expect

    created = [
        await site.create(site.org.admin, preview={"kind": kind, "content": content})
        for kind, content in HOSTILE.items()
    ]
    async with browser(chromium) as chrome:
        page = await chrome.new_page(viewport=DESKTOP)
        dialogs: list[str] = []
        page.on("dialog", lambda dialog: dialogs.append(dialog.message))
        await sign_in(page, site.url, site.org.members[0])
        for request in created:
            await page.goto(f"{site.url}/requests/{request['id']}")
            preview = page.locator("section[data-preview-kind]")
            await expect(preview).to_be_visible()
            assert await preview.locator("script, img, [onclick], [onerror]").count() == 0
            hrefs = await preview.locator("a[href]").evaluate_all(
                "links => links.map(link => link.getAttribute('href'))"
            )
            assert all(href.startswith(("https:", "http:")) for href in hrefs), hrefs
            # Hover and click every link-like thing: nothing may run.
            for link in await preview.locator("a").all():
                await link.hover()
        assert dialogs == []
