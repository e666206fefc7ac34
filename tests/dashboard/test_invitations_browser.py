"""Invitation to sign-in in a real browser (Debian's Chromium through Playwright, a live
server, a real SMTP server on loopback): an admin adds a person, the mail's link opens
the page where they choose a password, and they are signed in. Screenshots of the Add
user result and of that page at desktop and phone widths, under test-artifacts/.
"""

from __future__ import annotations

from typing import Any

import pytest
from bench.mailserver import MailBox

from tests.browser import DESKTOP, PHONE, Site, assert_accessible, browser, screenshot, sign_in
from tests.helpers import NO_SWEEP
from tests.notifications.support import mailbox, smtp

__all__ = ["mailbox", "smtp"]  # fixtures of tests/notifications/support.py

NEW_PASSWORD = "a phrase of my own choosing"


@pytest.fixture
def settings_overrides(smtp: tuple[MailBox, str]) -> dict[str, Any]:
    return {**NO_SWEEP, "smtp_url": smtp[1], "mail_from": "signoff <signoff@acme.example>"}


async def test_invited_person_chooses_a_password_and_is_signed_in(
    site: Site, chromium: str, smtp: tuple[MailBox, str]
) -> None:
    from playwright.async_api import expect

    mailbox = smtp[0]
    async with browser(chromium) as chrome:
        admin = await chrome.new_page(viewport=DESKTOP)
        await sign_in(admin, site.url, site.org.admin)
        await admin.goto(f"{site.url}/admin/users")
        await admin.get_by_text("Add a user").click()
        await expect(admin.get_by_text("e-mailed an invitation")).to_be_visible()
        await admin.get_by_label("Name", exact=True).fill("Nia Okafor")
        await admin.get_by_label("Email").fill("nia.okafor@acme.test")
        await admin.get_by_role("button", name="Add user").click()
        await expect(
            admin.get_by_role("heading", name="Invitation sent to Nia Okafor")
        ).to_be_visible()
        await expect(admin.get_by_test_id("mailed")).to_contain_text("nia.okafor@acme.test")
        await assert_accessible(admin)
        await screenshot(admin, "admin-users-invited")
        await admin.set_viewport_size(PHONE)
        await screenshot(admin, "admin-users-invited-phone")
        await admin.goto(f"{site.url}/admin/users")
        await expect(admin.get_by_text("Invited", exact=True)).to_be_visible()
        await expect(
            admin.get_by_role("button", name="Resend invitation to Nia Okafor")
        ).to_be_visible()
        await assert_accessible(admin)
        await screenshot(admin, "admin-users-list-invited-phone")
        await admin.set_viewport_size(DESKTOP)
        await screenshot(admin, "admin-users-list-invited")

        [mail] = await mailbox.wait_for(1)
        link = mail.link("Choose your password")
        assert link.startswith(f"{site.url}/password/")

        context = await chrome.new_context(viewport=DESKTOP)  # another person's browser
        invitee = await context.new_page()
        await invitee.goto(link)
        await expect(invitee.get_by_role("heading", name="Welcome to Acme")).to_be_visible()
        await expect(invitee.get_by_label("Email")).to_have_value("nia.okafor@acme.test")
        await assert_accessible(invitee)
        await screenshot(invitee, "set-password")
        await invitee.set_viewport_size(PHONE)
        await screenshot(invitee, "set-password-phone")
        await invitee.get_by_label("New password", exact=True).fill(NEW_PASSWORD)
        await invitee.get_by_label("Repeat the new password").fill(NEW_PASSWORD)
        await invitee.get_by_role("button", name="Set password and sign in").click()
        await invitee.wait_for_url(f"{site.url}/")
        await expect(
            invitee.get_by_text("Welcome, Nia Okafor. Your password is set.")
        ).to_be_visible()
        await expect(invitee.get_by_role("heading", name="Inbox")).to_be_visible()
        await expect(invitee.locator(".who-name")).to_have_text("Nia Okafor")

        # The link is spent.
        again = await invitee.goto(link)
        assert again is not None and again.status == 404
        await expect(invitee.get_by_text("has been used")).to_be_visible()
        await context.close()
