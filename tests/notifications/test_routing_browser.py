"""The routing page's form editor in a real browser (Debian's Chromium through
Playwright) against a live server: a channel and a rule added as rows, a test message
sent from a row, a mistake shown on its row, and screenshots at desktop and phone width."""

from __future__ import annotations

from typing import Any

import pytest
from bench.receiver import Receiver

from tests.browser import DESKTOP, PHONE, Site, assert_accessible, browser, screenshot, sign_in
from tests.helpers import NO_SWEEP

pytestmark = pytest.mark.anyio


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    return dict(NO_SWEEP)  # and no SMTP server: the e-mail channel is saved with a warning


async def test_routing_is_edited_as_rows_without_yaml(site: Site, chromium: str) -> None:
    from playwright.async_api import expect

    admin = site.org.admin
    async with Receiver() as slack, browser(chromium) as chrome:
        page = await chrome.new_page(viewport=DESKTOP)
        await sign_in(page, site.url, admin)
        await page.goto(f"{site.url}/settings/notifications")
        tabs = page.get_by_role("navigation", name="Admin")
        await expect(tabs.get_by_role("link", name="Notifications")).to_have_attribute(
            "aria-current", "page"
        )
        await expect(tabs.get_by_role("link", name="Users")).to_be_visible()

        new_channel = page.get_by_role("group", name="Add a channel")
        await new_channel.get_by_label("Name").fill("team")
        await new_channel.get_by_label("Type").select_option("slack")
        await new_channel.get_by_label("Address").fill(slack.url)
        await page.get_by_role("button", name="Save channels and rules").click()
        await expect(page.get_by_text("Routing saved.")).to_be_visible()

        new_channel = page.get_by_role("group", name="Add a channel")
        await new_channel.get_by_label("Name").fill("mail")
        await new_channel.get_by_label("Type").select_option("email")
        rule = page.get_by_role("group", name="Add a rule")
        await rule.get_by_label("Name").fill("critical")
        await rule.get_by_label("Critical").check()
        await rule.get_by_label("team").check()
        await rule.get_by_label("Audience").select_option("admins")
        await rule.get_by_label("Remind every").fill("10")
        await rule.get_by_label("Reminders (times)").fill("2")
        await page.get_by_role("button", name="Save channels and rules").click()
        await expect(page.get_by_text("Routing saved.")).to_be_visible()
        await expect(page.get_by_text("The saved routing cannot work yet")).to_be_visible()
        await expect(page.get_by_role("group", name="Rule 1: critical")).to_be_visible()
        await assert_accessible(page)

        saved = await site.api.get("/api/v1/routing", headers=admin.headers)
        document = saved.json()
        assert document["rules"] == [
            {
                "name": "critical",
                "match": {"priority": ["critical"]},
                "channels": ["team"],
                "audience": "admins",
                "reminders": {"after_minutes": 10, "times": 2},
                "require_sign_in_for_critical": True,
            }
        ]
        assert set(document["channels"]) == {"mail", "team"}
        assert [w["field"] for w in document["warnings"]] == ["channels.mail"]
        assert slack.url not in await page.content()  # masked in the field

        team = page.get_by_role("group", name="Channel team")
        await team.get_by_role("button", name="Send a test notification").click()
        await expect(page.get_by_text("Test notification sent to team.")).to_be_visible()
        assert len(slack.received) == 1

        await screenshot(page, "routing-desktop")
        await page.set_viewport_size(PHONE)
        await assert_accessible(page)
        await screenshot(page, "routing-phone")

        team = page.get_by_role("group", name="Channel team")
        await team.get_by_label("Address").fill("ftp://files.example/hook")
        await page.get_by_role("button", name="Save channels and rules").click()
        await expect(page.get_by_text("Not saved: fix what is marked below.")).to_be_visible()
        await expect(page.get_by_role("group", name="Channel team")).to_contain_text(
            "Address: must be an absolute http or https URL"
        )
        await assert_accessible(page)
        await screenshot(page, "routing-error-phone")
    after = await site.api.get("/api/v1/routing", headers=admin.headers)
    assert after.json() == document
