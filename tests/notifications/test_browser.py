"""One-click links in a real browser (Debian's Chromium through Playwright) against a live
uvicorn server whose own sender mails a loopback SMTP server."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from bench.receiver import Receiver

from signoff.config import Settings
from tests.browser import DESKTOP, PHONE, Site, assert_accessible, browser, screenshot, sign_in
from tests.notifications.support import MailBox

pytestmark = pytest.mark.anyio


@pytest.fixture
def settings_overrides(smtp: tuple[MailBox, str]) -> dict[str, Any]:
    return {"smtp_url": smtp[1], "expiry_sweep_interval_seconds": 3600.0}


async def route_mail(site: Site, **rule: Any) -> None:
    document = {
        "channels": {"mail": {"type": "email"}},
        "rules": [{"channels": ["mail"], "audience": {"users": ["member1@acme.example"]}, **rule}],
    }
    answer = await site.api.put("/api/v1/routing", json=document, headers=site.org.admin.headers)
    assert answer.status_code == 200, answer.text


async def test_the_mailed_approve_link_confirms_then_approves_once(
    site: Site, chromium: str, mailbox: MailBox, settings: Settings
) -> None:
    from playwright.async_api import expect

    await route_mail(site)
    async with Receiver() as callback:
        created = await site.create(site.org.member, callback_url=callback.url)
        [mail] = await mailbox.wait_for(1)
        approve = mail.link("Approve")
        assert approve.startswith(site.url + "/links/")

        for _ in range(10):  # scanners and previews: any number of GETs change nothing
            looked = await site.api.get(approve)
            assert looked.status_code == 200 and "Confirm: approve" in looked.text
        assert (await site.read(created["id"]))["status"] == "pending"

        async with browser(chromium) as chrome:
            page = await chrome.new_page(viewport=DESKTOP)
            await page.goto(approve)
            await expect(page.get_by_role("heading", name="Approve this request?")).to_be_visible()
            await expect(page.get_by_text("Deploy v2 to production").first).to_be_visible()
            await assert_accessible(page)
            assert (await site.read(created["id"]))["status"] == "pending"
            await page.get_by_role("button", name="Confirm: approve").click()
            await expect(page.get_by_text("You approved this request.")).to_be_visible()
            [delivered] = await callback.wait_for(1)
            again = await page.goto(approve)
            assert again is not None and again.status == 410
            await expect(page.get_by_role("heading", name="Link already used")).to_be_visible()
            await assert_accessible(page)

    payload = orjson.loads(delivered.body)
    assert payload["event"] == "approval.decided" and payload["status"] == "approved"
    assert payload["decided_by"]["email"] == "member1@acme.example"
    read = await site.read(created["id"])
    assert read["status"] == "approved"


async def test_a_critical_request_needs_the_person_signed_in_too(
    site: Site, chromium: str, mailbox: MailBox
) -> None:
    from playwright.async_api import expect

    await route_mail(site)
    created = await site.create(site.org.member, priority="critical")
    [mail] = await mailbox.wait_for(1)
    reject = mail.link("Reject")
    async with browser(chromium) as chrome:
        page = await chrome.new_page(viewport=DESKTOP)
        await page.goto(reject)
        await expect(page.get_by_role("heading", name="Sign in to decide")).to_be_visible()
        assert (await site.read(created["id"]))["status"] == "pending"
        await sign_in(page, site.url, site.org.members[0])
        await page.goto(reject)
        await page.get_by_role("button", name="Confirm: reject").click()
        await page.wait_for_url(f"{site.url}/requests/{created['id']}")
        await expect(page.get_by_text("You rejected this request.")).to_be_visible()
    assert (await site.read(created["id"]))["status"] == "rejected"


async def test_the_request_page_lists_the_mail_sent_on_desktop_and_phone(
    site: Site, chromium: str, mailbox: MailBox
) -> None:
    from playwright.async_api import expect

    await route_mail(site, reminders={"after_minutes": 30, "times": 1})
    created = await site.create(site.org.member)
    await mailbox.wait_for(1)
    async with browser(chromium) as chrome:
        page = await chrome.new_page(viewport=DESKTOP)
        await sign_in(page, site.url, site.org.members[0])
        await page.goto(f"{site.url}/requests/{created['id']}")
        section = page.locator("#notifications")
        await expect(section.get_by_text("Approval requested")).to_be_visible()
        await expect(section.get_by_text("Sent", exact=True)).to_be_visible()
        await expect(section.get_by_text("member1@acme.example").first).to_be_visible()
        await expect(section.get_by_text("Reminder")).to_be_visible()
        await assert_accessible(page)
        await screenshot(page, "request-notifications-desktop")
        await page.set_viewport_size(PHONE)
        await expect(section.get_by_text("Approval requested")).to_be_visible()
        await assert_accessible(page)
        await screenshot(page, "request-notifications-phone")
