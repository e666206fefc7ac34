"""Approve with edits end to end in Chromium, on SQLite and PostgreSQL: an agent creates
a request with arguments and a schema through the client library against a live server,
a person edits and approves it in the browser (the form, its refusal, the diff, the
confirm), and the agent verifies the receipt offline against /.well-known/jwks.json,
redeems it once, and fails to redeem it again. Screenshots of the form and the diff at
desktop and phone widths go to test-artifacts/edit-*.png."""

from __future__ import annotations

from typing import Any

import pytest
from signoff_client import AsyncSignoffClient, ReceiptUsedUp, arguments_hash, verify_receipt

from tests.browser import DESKTOP, PHONE, Site, assert_accessible, browser, screenshot, sign_in

pytestmark = pytest.mark.anyio

SCHEMA = {
    "type": "object",
    "properties": {
        "service": {"type": "string", "description": "The service to scale"},
        "replicas": {"type": "integer", "minimum": 1, "maximum": 20},
        "region": {"enum": ["eu-west", "us-east"]},
        "dry_run": {"type": "boolean"},
        "notify": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["service", "replicas"],
}
ARGS = {"service": "billing", "replicas": 12, "region": "eu-west", "dry_run": False,
        "notify": ["ops@example.com"]}  # fmt: skip


async def _page_overflows(page: Any) -> bool:
    overflow: bool = await page.evaluate(
        "document.documentElement.scrollWidth > document.documentElement.clientWidth"
    )
    return overflow


async def test_edit_in_the_browser_then_verify_and_redeem_once(site: Site, chromium: str) -> None:
    from playwright.async_api import expect

    agent_key = site.org.member.api_key
    async with AsyncSignoffClient(site.url, api_key=agent_key) as agent:
        created = await agent.create_approval(
            "Scale billing", "Evening peak", "high", action_type="scale.service",
            arguments=ARGS, arguments_schema=SCHEMA,
        )  # fmt: skip
        async with browser(chromium) as chrome:
            page = await chrome.new_page(viewport=DESKTOP)
            await sign_in(page, site.url, site.org.members[1])
            await page.goto(f"{site.url}/requests/{created.id}")
            await expect(page.get_by_role("heading", name="Arguments")).to_be_visible()
            await page.get_by_role("link", name="Edit and approve").click()
            await expect(page.get_by_role("heading", name="Edit and approve")).to_be_visible()
            await assert_accessible(page)
            await screenshot(page, "edit-form-desktop")
            await page.set_viewport_size(PHONE)
            assert not await _page_overflows(page)
            await screenshot(page, "edit-form-phone")
            await page.set_viewport_size(DESKTOP)
            # Past the schema's maximum: the form again, saying why.
            await page.get_by_label("replicas").fill("40")
            await page.get_by_role("button", name="Review changes").click()
            await expect(
                page.get_by_text("replicas 40 is greater than the maximum")
            ).to_be_visible()
            await page.get_by_label("replicas").fill("4")
            await page.get_by_label("region").select_option(label="us-east")
            await page.get_by_role("button", name="Review changes").click()
            await expect(page.get_by_role("heading", name="Confirm your edit")).to_be_visible()
            await expect(page.locator("ins.arg-new", has_text="4")).to_be_visible()
            await assert_accessible(page)
            await screenshot(page, "edit-diff-desktop")
            await page.set_viewport_size(PHONE)
            assert not await _page_overflows(page)
            await screenshot(page, "edit-diff-phone")
            assert (await site.read(created.id))["status"] == "pending"  # nothing saved yet
            await page.get_by_role("button", name="Approve with these arguments").click()
            await expect(page.get_by_text("You edited the arguments.")).to_be_visible()
            await screenshot(page, "edit-done-phone")

        decided = await agent.wait_for_decision(created.id, timeout=20)
        edited = {**ARGS, "replicas": 4, "region": "us-east"}
        assert decided.is_approved and decided.arguments_edited and decided.arguments == edited
        assert decided.receipt is not None
        receipt = verify_receipt(
            decided.receipt, jwks=await agent.jwks(), arguments=edited, action_type="scale.service"
        )
        assert receipt.arguments_hash == arguments_hash(edited)
        assert receipt.decided_by == (site.org.members[1].user_id,)
        redeemed = await agent.redeem_receipt(decided.receipt, arguments=edited)
        assert redeemed.uses_left == 0
        with pytest.raises(ReceiptUsedUp):
            await agent.redeem_receipt(decided.receipt, arguments=edited)
