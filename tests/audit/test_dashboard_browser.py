"""The admin audit page in Chromium at desktop and phone width: the chain's verified
status and the export button, accessible. Screenshots: test-artifacts/audit-<width>.png."""

from __future__ import annotations

import pytest

from signoff.audit.sealing import seal_once
from signoff.context import AppContext
from tests.audit.test_chain import requests_only
from tests.browser import DESKTOP, PHONE, Site, assert_accessible, browser, screenshot, sign_in

pytestmark = pytest.mark.anyio


async def test_audit_page_shows_the_verified_chain(
    site: Site, chromium: str, ctx: AppContext
) -> None:
    from playwright.async_api import expect

    await requests_only(ctx, site.org)
    for index in range(3):
        await site.create(site.org.admin, title=f"Audited change {index}")
    await seal_once(ctx)
    async with browser(chromium) as chrome:
        page = await chrome.new_page(viewport=DESKTOP)
        await sign_in(page, site.url, site.org.admin)
        await page.goto(f"{site.url}/admin/audit")
        status = page.get_by_role("status").filter(has_text="Chain verified")
        await expect(status).to_contain_text("up to #3")
        await expect(page.get_by_role("link", name="Export the chain")).to_be_visible()
        await assert_accessible(page)
        await screenshot(page, "audit-desktop")
        await page.set_viewport_size(PHONE)
        await expect(page.get_by_role("link", name="Export the chain")).to_be_visible()
        await screenshot(page, "audit-phone")
