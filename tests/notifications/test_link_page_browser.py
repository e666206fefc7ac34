"""The one-click confirmation page in Chromium, at desktop and phone widths: the metadata
set in under its heading, room before the button, and the page once the link is used."""

from __future__ import annotations

from typing import Any

import pytest

from tests.browser import DESKTOP, PHONE, Site, assert_accessible, browser, screenshot, sign_in
from tests.notifications.support import MailBox
from tests.notifications.test_browser import route_mail

pytestmark = pytest.mark.anyio

# Room between the last of the request's facts and the confirmation button.
MIN_GAP_PX = 24


async def box(locator: Any) -> dict[str, float]:
    found: dict[str, float] | None = await locator.bounding_box()
    assert found is not None
    return found


async def test_the_confirmation_page_before_and_after_use(
    site: Site, chromium: str, mailbox: MailBox
) -> None:
    from playwright.async_api import expect

    await route_mail(site)
    await site.create(
        site.org.member,
        title="Deploy billing v2",
        source="github-actions",
        action_type="deploy.production",
        metadata={"repo": "acme/billing", "sha": "9f2c1e7", "regions": ["eu", "us"]},
    )
    [mail] = await mailbox.wait_for(1)
    approve = mail.link("Approve")
    voter = site.org.members[0]
    async with browser(chromium) as chrome:
        page = await chrome.new_page(viewport=DESKTOP)
        await page.goto(approve)
        await expect(page.get_by_role("link", name="signoff, home")).to_be_visible()
        await expect(page.locator("[data-voter]")).to_have_text(
            f"Confirming records the vote of {voter.name} ({voter.email})."
        )
        for viewport, name in ((DESKTOP, "link-ready-desktop"), (PHONE, "link-ready-phone")):
            await page.set_viewport_size(viewport)
            heading = await box(page.get_by_role("heading", name="Metadata"))
            first_key = await box(page.locator(".metadata-facts dt").first)
            assert first_key["x"] >= heading["x"] + 12, "the keys are set in under Metadata"
            metadata = await box(page.locator(".link-metadata"))
            button = await box(page.get_by_role("button", name="Confirm: approve"))
            gap = button["y"] - (metadata["y"] + metadata["height"])
            assert gap >= MIN_GAP_PX, f"{gap}px between the metadata and the button"
            await assert_accessible(page)
            await screenshot(page, name)

        await page.set_viewport_size(DESKTOP)
        await page.get_by_role("button", name="Confirm: approve").click()
        await expect(page.get_by_text("You approved this request.")).to_be_visible()
        await screenshot(page, "link-done-desktop")

        await page.goto(approve)
        await expect(page.get_by_role("heading", name="Link already used")).to_be_visible()
        await expect(page.get_by_text("Deploy billing v2")).to_have_count(0)
        await assert_accessible(page)
        await page.set_viewport_size(PHONE)
        await screenshot(page, "link-used-anonymous-phone")

        await page.set_viewport_size(DESKTOP)
        await sign_in(page, site.url, site.org.members[2])
        await page.goto(approve)
        outcome = page.locator("[data-outcome]")
        await expect(outcome).to_contain_text(f"Approved by {voter.name} on")
        await expect(page.get_by_text("Deploy billing v2")).to_be_visible()
        await assert_accessible(page)
        await screenshot(page, "link-used-member-desktop")
        await page.set_viewport_size(PHONE)
        await screenshot(page, "link-used-member-phone")
