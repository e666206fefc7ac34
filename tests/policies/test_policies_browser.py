"""The policy editor in a real browser (Debian's Chromium through Playwright) against a
live server: a draft's dry run shown before Save, a save, a restore, a mistake named,
and screenshots at desktop and phone width."""

from __future__ import annotations

from typing import Any

import pytest

from tests.browser import DESKTOP, PHONE, Site, assert_accessible, browser, screenshot, sign_in
from tests.helpers import NO_SWEEP

pytestmark = pytest.mark.anyio

DRAFT = """\
rules:
  - name: small-refunds
    condition: request.action_type == "refund.issue" && request.arguments.amount <= 50
    effect: auto_approve
    budget: {per: day, max_count: 1}
"""


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    return dict(NO_SWEEP)


async def test_dry_run_before_save_then_restore(site: Site, chromium: str) -> None:
    from playwright.async_api import expect

    admin = site.org.admin
    for amount, decision in ((10, "reject"), (20, "approve"), (30, "approve")):
        created = await site.create(
            site.org.member, action_type="refund.issue", arguments={"amount": amount}
        )
        await site.api.patch(
            f"/api/v1/approvals/{created['id']}",
            json={"decision": decision},
            headers=admin.headers,
        )
    async with browser(chromium) as chrome:
        page = await chrome.new_page(viewport=DESKTOP)
        await sign_in(page, site.url, admin)
        await page.goto(f"{site.url}/settings/policies")
        await expect(page.get_by_role("button", name="Save as version 1")).to_have_count(0)
        await page.get_by_label("Rules").fill(DRAFT)
        await page.get_by_role("button", name="Dry run on past requests").click()
        dry_run = page.locator("#dry-run")
        await expect(dry_run).to_contain_text("3 decided requests replayed")
        await expect(dry_run).to_contain_text("Disagreements with people: 1")
        await expect(dry_run).to_contain_text("Budgets that would have run out")
        await assert_accessible(page)
        await screenshot(page, "policies-dry-run-desktop")
        await page.set_viewport_size(PHONE)
        await assert_accessible(page)
        await screenshot(page, "policies-dry-run-phone")
        await page.get_by_role("button", name="Save as version 1").click()
        await expect(page.get_by_text("Policies saved as version 1.")).to_be_visible()

        await page.get_by_label("Rules").fill("rules: []")
        await page.get_by_role("button", name="Dry run on past requests").click()
        await page.get_by_role("button", name="Save as version 2").click()
        await expect(page.get_by_text("Policies saved as version 2.")).to_be_visible()
        await page.get_by_role("button", name="Restore").first.click()
        await expect(page.get_by_text("Version 1 restored as version 3.")).to_be_visible()
        await page.set_viewport_size(DESKTOP)
        await screenshot(page, "policies-versions-desktop")

        await page.get_by_label("Rules").fill(
            "rules: [{name: x, condition: 'request.title ==', effect: auto_approve}]"
        )
        await page.get_by_role("button", name="Dry run on past requests").click()
        await expect(page.locator("#policy-errors")).to_contain_text("rules.0.condition")
        await assert_accessible(page)
    saved = await site.api.get("/api/v1/policies", headers=admin.headers)
    assert saved.json()["version"] == 3 and saved.json()["restored_from"] == 1
