"""A generated password in a real browser (Debian's Chromium through Playwright, a live
server, no SMTP): the admin adds a person and sees their initial password; that person
signs in with it and is asked for their own before the inbox opens. Screenshots of the
Add user result and of the "choose your password" page at desktop and phone widths.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.browser import DESKTOP, PHONE, Site, assert_accessible, browser, screenshot, sign_in
from tests.helpers import NO_SWEEP

OWN_PASSWORD = "my very own pass phrase"


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    return {**NO_SWEEP, "smtp_url": None}


async def test_a_generated_password_is_replaced_at_first_sign_in(site: Site, chromium: str) -> None:
    from playwright.async_api import expect

    async with browser(chromium) as chrome:
        admin = await chrome.new_page(viewport=DESKTOP)
        await sign_in(admin, site.url, site.org.admin)
        await admin.goto(f"{site.url}/admin/users")
        await admin.get_by_text("Add a user").click()
        await admin.get_by_label("Name", exact=True).fill("Ola Nordmann")
        await admin.get_by_label("Email").fill("ola@acme.test")
        await admin.get_by_role("button", name="Add user").click()
        await expect(admin.get_by_text("When they first sign in, they must choose")).to_be_visible()
        password = (await admin.get_by_test_id("password").inner_text()).strip()
        await screenshot(admin, "admin-users-generated-password")
        await admin.set_viewport_size(PHONE)
        await screenshot(admin, "admin-users-generated-password-phone")

        context = await chrome.new_context(viewport=DESKTOP)  # Ola's own browser
        ola = await context.new_page()
        await ola.goto(f"{site.url}/signin?next=/history")
        await ola.get_by_label("Email").fill("ola@acme.test")
        await ola.get_by_label("Password").fill(password)
        await ola.get_by_role("button", name="Sign in", exact=True).click()
        await expect(ola.get_by_role("heading", name="Choose your password")).to_be_visible()
        assert "/account/choose-password" in ola.url
        await assert_accessible(ola)
        await screenshot(ola, "choose-password")
        await ola.set_viewport_size(PHONE)
        await screenshot(ola, "choose-password-phone")
        await ola.set_viewport_size(DESKTOP)

        # Other pages lead back here until it is done.
        await ola.goto(f"{site.url}/account")
        await expect(ola.get_by_role("heading", name="Choose your password")).to_be_visible()

        await ola.get_by_label("New password", exact=True).fill(OWN_PASSWORD)
        await ola.get_by_label("Repeat the new password").fill(OWN_PASSWORD)
        await ola.get_by_role("button", name="Set password").click()
        await ola.wait_for_url(f"{site.url}/account")
        await expect(ola.get_by_text("Your password is set.")).to_be_visible()
        await ola.goto(f"{site.url}/")
        await expect(ola.get_by_role("heading", name="Inbox")).to_be_visible()
        await context.close()
