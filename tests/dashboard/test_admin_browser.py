"""The admin pages in a real browser (Debian's Chromium through Playwright, a live server):
a connection created and its key used on the API, then revoked; a connection whose owner
is deactivated transferred on a phone, with every admin tab and every owner's address in
sight; a failed delivery retried; the emergency stop on and off; axe-core on every admin
page; screenshots of the connections page at desktop and phone widths under
test-artifacts/.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

import httpx
import pytest
from bench.receiver import Receiver, Reply

from signoff.common.time import utcnow
from signoff.context import AppContext
from signoff.orgs import service as orgs_service
from tests.browser import DESKTOP, PHONE, Site, assert_accessible, browser, screenshot, sign_in
from tests.conftest import approval_body
from tests.helpers import NO_SWEEP


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    # One attempt per delivery: a refused callback is "failed" at once, ready to retry.
    return {**NO_SWEEP, "delivery_retry_delays_seconds": []}


async def _me(site: Site, key: str) -> httpx.Response:
    return await site.api.get("/api/v1/me", headers={"Authorization": f"Bearer {key}"})


async def test_admin_creates_a_connection_uses_its_key_then_revokes_it(
    site: Site, chromium: str
) -> None:
    from playwright.async_api import expect

    async with browser(chromium) as chrome:
        page = await chrome.new_page(viewport=DESKTOP)
        await sign_in(page, site.url, site.org.admin)
        await page.get_by_role("link", name="Admin").click()
        await expect(page.get_by_role("heading", name="Connections", exact=True)).to_be_visible()
        await page.get_by_label("Name", exact=True).fill("ci-release-bot")
        await page.get_by_role("button", name="Create connection").click()

        key = (await page.get_by_test_id("api-key").inner_text()).strip()
        secret = (await page.get_by_test_id("webhook-secret").inner_text()).strip()
        assert secret.startswith("whsec_")
        await expect(page.get_by_role("button", name="Copy").first).to_be_visible()
        await assert_accessible(page)
        await screenshot(page, "admin-connection-created")
        me = await _me(site, key)
        assert me.status_code == 200 and me.json()["connection"]["name"] == "ci-release-bot"

        await page.get_by_role("link", name="Done").click()
        row = page.locator("tr", has_text="ci-release-bot")
        await row.get_by_text("Revoke…").click()
        await row.get_by_role("button", name="Revoke", exact=True).click()
        await expect(page.get_by_role("status")).to_contain_text("ci-release-bot is revoked")
        assert (await _me(site, key)).status_code == 401

        await assert_accessible(page)
        await screenshot(page, "admin-connections-desktop")
        phone = await chrome.new_page(viewport=PHONE)
        await sign_in(phone, site.url, site.org.admin)
        await phone.goto(f"{site.url}/admin/connections")
        await assert_accessible(phone)
        await screenshot(phone, "admin-connections-phone")
        dark = await chrome.new_page(viewport=DESKTOP, color_scheme="dark")
        await sign_in(dark, site.url, site.org.admin)
        await dark.goto(f"{site.url}/admin/connections")
        await assert_accessible(dark)
        await screenshot(dark, "admin-connections-dark")


async def test_a_phone_shows_every_admin_tab_and_whole_addresses_and_transfers(
    site: Site, chromium: str, ctx: AppContext
) -> None:
    from playwright.async_api import expect

    long_address = "margaret.hamilton-longname@engineering.example.com"
    async with ctx.transaction() as uow:
        await orgs_service.create_user(
            uow.orgs,
            uuid.UUID(site.org.id),
            email=long_address,
            name="Margaret Hamilton",
            role="admin",
            password=None,
            now=utcnow(),
        )
        gone = await uow.orgs.get_user(uuid.UUID(site.org.id), uuid.UUID(site.org.member.user_id))
        assert gone is not None
        await orgs_service.deactivate_user(uow.oauth, gone, utcnow())

    async with browser(chromium) as chrome:
        phone = await chrome.new_page(viewport=PHONE)
        await sign_in(phone, site.url, site.org.admin)
        await phone.goto(f"{site.url}/admin/connections")
        # Every tab lies wholly inside the screen: wrapped, not cut off at the edge.
        tabs = phone.get_by_role("navigation", name="Admin").get_by_role("link")
        assert await tabs.count() >= 7
        for index in range(await tabs.count()):
            box = await tabs.nth(index).bounding_box()
            assert box and box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"], (
                await tabs.nth(index).inner_text(),
                box,
            )
        # Every owner's address is shown whole, inside the form.
        owners = phone.locator("#new-connection .owner-list")
        await expect(owners.get_by_text(long_address)).to_be_visible()
        assert await owners.evaluate("list => list.scrollWidth <= list.clientWidth")
        address = await owners.get_by_text(long_address).bounding_box()
        assert address and address["x"] + address["width"] <= PHONE["width"]
        row = phone.locator("tr", has_text="conn-1")
        await expect(row.get_by_test_id("owner-deactivated")).to_be_visible()
        await assert_accessible(phone)
        await screenshot(phone, "admin-connections-owner-deactivated-phone")

        await row.get_by_text("Transfer…").click()
        await row.get_by_label("Margaret Hamilton").check()
        await assert_accessible(phone)
        await screenshot(phone, "admin-connections-transfer-phone")
        await row.get_by_role("button", name="Transfer conn-1").click()
        await expect(phone.get_by_role("status")).to_contain_text(
            "conn-1 now acts as Margaret Hamilton"
        )
        me = await _me(site, site.org.member.api_key)
        assert me.json()["user"]["email"] == long_address

        desktop = await chrome.new_page(viewport=DESKTOP)
        await sign_in(desktop, site.url, site.org.admin)
        await desktop.goto(f"{site.url}/admin/connections")
        await expect(desktop.get_by_text(long_address).first).to_be_visible()
        await screenshot(desktop, "admin-connections-transferred-desktop")


async def test_admin_retries_a_failed_delivery(site: Site, chromium: str) -> None:
    from playwright.async_api import expect

    async with Receiver(replies=[Reply(503, b"maintenance")]) as receiver:
        request = await site.create(
            site.org.member, title="Rotate the TLS certificate", callback_url=receiver.url
        )
        decided = await site.api.patch(
            f"/api/v1/approvals/{request['id']}",
            json={"decision": "approve"},
            headers=site.org.admin.headers,
        )
        assert decided.status_code == 200, decided.text
        await receiver.wait_for(1)
        async with browser(chromium) as chrome:
            page = await chrome.new_page(viewport=DESKTOP)
            await sign_in(page, site.url, site.org.admin)
            await page.goto(f"{site.url}/admin/deliveries")
            await page.get_by_label("Status").select_option("failed")
            await page.get_by_role("button", name="Filter").click()
            await assert_accessible(page)
            await page.get_by_role("link", name="Rotate the TLS certificate").click()
            await expect(page.get_by_text("HTTP 503")).to_be_visible()
            await assert_accessible(page)
            await page.get_by_role("button", name="Retry now").click()
            await expect(page.get_by_role("status")).to_contain_text("Attempt 2 succeeded")
            await receiver.wait_for(2)
    log = await site.api.get("/api/v1/webhooks", headers=site.org.admin.headers)
    assert [(a["attempt"], a["success"]) for a in log.json()["data"]] == [(2, True), (1, False)]


async def test_emergency_stop_on_and_off(site: Site, chromium: str) -> None:
    from playwright.async_api import expect

    async def create() -> int:
        answer = await site.api.post(
            "/api/v1/approvals", json=approval_body(), headers=site.org.member.headers
        )
        return answer.status_code

    async with browser(chromium) as chrome:
        page = await chrome.new_page(viewport=DESKTOP)
        await sign_in(page, site.url, site.org.admin)
        await page.goto(f"{site.url}/admin/emergency-stop")
        await assert_accessible(page)
        await page.get_by_label(re.compile("I understand")).check()
        await page.get_by_role("button", name="Turn the stop on").click()
        await expect(page.get_by_role("heading", name="The emergency stop is on")).to_be_visible()
        await expect(page.get_by_text(f"Turned on by {site.org.admin.name}")).to_be_visible()
        await expect(page.get_by_role("alert")).to_contain_text("Emergency stop is on")
        await assert_accessible(page)
        assert await create() == 503
        await page.get_by_role("button", name="Turn the stop off").click()
        await expect(page.get_by_role("heading", name="The emergency stop is off")).to_be_visible()
        assert await create() == 201


async def test_every_admin_page_passes_axe(site: Site, chromium: str) -> None:
    await site.create(site.org.member, title="Audited request")
    async with browser(chromium) as chrome:
        for scheme in ("light", "dark"):
            page = await chrome.new_page(viewport=DESKTOP, color_scheme=scheme)
            await sign_in(page, site.url, site.org.admin)
            for path in ("users", "oauth-clients", "deliveries", "audit"):
                await page.goto(f"{site.url}/admin/{path}")
                await assert_accessible(page)
            await page.goto(f"{site.url}/admin/users")
            await page.get_by_text("Add a user").click()
            await page.get_by_label("Name", exact=True).fill("Ola Nordmann")
            await page.get_by_label("Email").fill(f"ola-{scheme}@acme.test")
            await page.get_by_role("button", name="Add user").click()
            assert len((await page.get_by_test_id("password").inner_text()).strip()) >= 16
            await assert_accessible(page)
            if scheme == "light":
                await screenshot(page, "admin-users-new-password")
