"""Passkeys in Chromium with its virtual authenticator (the DevTools protocol's WebAuthn
domain through Playwright's CDP session), on both databases: register on the account
page, sign in with the passkey, approve a critical request with it, an approval refused
without one, a replayed assertion and one made for another request refused.

WebAuthn needs a secure context and a relying-party id that is a domain: the server is
reached as http://localhost:<port>. Screenshots: test-artifacts/passkeys-*.png."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from signoff.config import Settings
from signoff.context import AppContext
from signoff.models import AuditEvent
from signoff.passkeys import service
from tests.browser import (
    DESKTOP,
    PHONE,
    Site,
    assert_accessible,
    browser,
    live_server,
    screenshot,
    sign_in,
)
from tests.conftest import Member, create_org
from tests.oauth.support import give_password

pytestmark = pytest.mark.anyio


@pytest.fixture
def localhost_server(settings: Settings) -> Iterator[str]:
    yield from live_server(settings, "localhost")


@pytest.fixture
async def site(ctx: AppContext, localhost_server: str) -> AsyncIterator[Site]:
    org = await create_org(ctx, "Acme", members=2)
    for person in (org.admin, *org.members):
        await give_password(ctx, person)
    async with ctx.transaction() as uow:
        await service.set_passkey_for(uow.passkeys, uuid.UUID(org.id), "critical")
    async with httpx.AsyncClient(base_url=localhost_server, timeout=10) as api:
        yield Site(localhost_server, org, api)


async def virtual_authenticator(page: Any) -> Any:
    cdp = await page.context.new_cdp_session(page)
    await cdp.send("WebAuthn.enable")
    await cdp.send(
        "WebAuthn.addVirtualAuthenticator",
        {
            "options": {
                "protocol": "ctap2",
                "transport": "internal",
                "hasResidentKey": True,
                "hasUserVerification": True,
                "isUserVerified": True,
                "automaticPresenceSimulation": True,
            }
        },
    )
    return cdp


async def register_passkey(page: Any, base_url: str, name: str) -> None:
    from playwright.async_api import expect

    await page.goto(f"{base_url}/account")
    form = page.locator("[data-passkey-register]")
    await form.get_by_label("Name").fill(name)
    await form.get_by_role("button", name="Add a passkey").click()
    await expect(page.get_by_text(f"Passkey “{name}” added.")).to_be_visible()
    await expect(page.locator("#passkeys .cell-strong", has_text=name)).to_be_visible()


async def test_register_then_sign_in_with_the_passkey(
    site: Site, chromium: str, ctx: AppContext
) -> None:
    from playwright.async_api import expect

    async with browser(chromium) as chrome:
        page = await chrome.new_page(viewport=DESKTOP)
        await virtual_authenticator(page)
        await sign_in(page, site.url, site.org.member)
        await register_passkey(page, site.url, "Work laptop")
        await assert_accessible(page)
        await screenshot(page, "passkeys-account-desktop")
        await page.set_viewport_size(PHONE)
        await screenshot(page, "passkeys-account-phone")
        await page.set_viewport_size(DESKTOP)
        # Signed out, the passkey alone signs in: no e-mail, no password.
        await page.get_by_role("button", name="Sign out").click()
        await page.wait_for_url(f"{site.url}/signin*")
        button = page.get_by_role("button", name="Sign in with a passkey")
        await expect(button).to_be_visible()
        await assert_accessible(page)
        await screenshot(page, "passkeys-signin-desktop")
        await page.set_viewport_size(PHONE)
        await screenshot(page, "passkeys-signin-phone")
        await button.click()
        await page.wait_for_url(f"{site.url}/")
        await page.goto(f"{site.url}/account")
        await expect(page.get_by_text(site.org.member.email).first).to_be_visible()
        # Its last use shows on the account page; removing it empties the list.
        row = page.locator("#passkeys tbody tr")
        await expect(row.locator("time")).to_have_count(2)
        await row.get_by_role("button", name="Remove").click()
        await expect(page.get_by_text("You have no passkey yet.")).to_be_visible()
    # Both went into the org's audit chain, the registration with the public key.
    async with ctx.db.read_session() as session:
        events = (
            await session.scalars(
                select(AuditEvent)
                .where(
                    AuditEvent.org_id == uuid.UUID(site.org.id),
                    AuditEvent.type.like("passkey.%"),
                )
                .order_by(AuditEvent.created_at)
            )
        ).all()
    assert [e.type for e in events] == ["passkey.registered", "passkey.removed"]
    assert {str(e.actor_id) for e in events} == {site.org.member.user_id}
    assert events[0].data["name"] == "Work laptop" and events[0].data["public_key"]


async def _open(page: Any, site: Site, request_id: str) -> None:
    await page.goto(f"{site.url}/requests/{request_id}")


async def test_critical_approval_signed_with_the_passkey(site: Site, chromium: str) -> None:
    from playwright.async_api import expect

    admin: Member = site.org.admin
    one = await site.create(admin, priority="critical", title="Wire 40,000 EUR")
    two = await site.create(admin, priority="critical", title="Delete the staging cluster")
    sent: list[dict[str, Any]] = []
    async with browser(chromium) as chrome:
        page = await chrome.new_page(viewport=DESKTOP)
        page.on(
            "request",
            lambda r: (
                sent.append({"url": r.url, "body": r.post_data})
                if r.method == "POST" and r.url.endswith("/decision")
                else None
            ),
        )
        await virtual_authenticator(page)
        await sign_in(page, site.url, site.org.member)
        # No passkey yet: the approval is refused, and the request stays pending.
        await _open(page, site, one["id"])
        await expect(page.get_by_text("This decision is signed with your passkey")).to_be_visible()
        await page.get_by_role("button", name="Approve").click()
        await expect(
            page.get_by_text("you have none: add one on your account page")
        ).to_be_visible()
        assert (await site.read(one["id"]))["status"] == "pending"
        # With one, the same click signs the decision.
        await register_passkey(page, site.url, "Phone")
        await _open(page, site, one["id"])
        await page.get_by_role("button", name="Approve").click()
        await expect(page.get_by_text("You approved this request.")).to_be_visible()
        await expect(page.get_by_text("Signed with a passkey")).to_be_visible()
        assert (await site.read(one["id"]))["status"] == "approved"
        await screenshot(page, "passkeys-request-approved-desktop")
        # The form the browser sent, sent again: to the same request, and to another.
        (signed,) = [s for s in sent if s["body"] and "passkey_credential=%7B" in s["body"]]
        cookies = {c["name"]: c["value"] for c in await page.context.cookies()}
        async with httpx.AsyncClient(base_url=site.url, cookies=cookies) as replay:
            headers = {"Content-Type": "application/x-www-form-urlencoded"}
            for target in (one["id"], two["id"]):
                answer = await replay.post(
                    f"/requests/{target}/decision", content=signed["body"], headers=headers
                )
                assert answer.status_code == 303
                flash = answer.headers["set-cookie"]
                assert "passkey" in flash.lower(), flash
        assert (await site.read(two["id"]))["status"] == "pending"
        # The API cannot decide it either: it points at the page.
        answer = await site.api.patch(
            f"/api/v1/approvals/{two['id']}", json={"decision": "approve"}, headers=admin.headers
        )
        assert answer.status_code == 403
        assert answer.json()["error"]["details"]["url"] == f"{site.url}/requests/{two['id']}"


async def test_an_admin_sets_which_decisions_need_a_passkey(
    ctx: AppContext, site: Site, chromium: str
) -> None:
    from playwright.async_api import expect

    async with browser(chromium) as chrome:
        page = await chrome.new_page(viewport=DESKTOP)
        await sign_in(page, site.url, site.org.admin)
        await page.goto(f"{site.url}/admin/users")
        await page.get_by_label("Need a passkey for").select_option("all")
        await page.locator("#passkey-setting").get_by_role("button", name="Save").click()
        await expect(
            page.get_by_text("Every decision needs the approver's passkey.")
        ).to_be_visible()
        await expect(page.get_by_label("Need a passkey for")).to_have_value("all")
        await assert_accessible(page)
        await page.locator("#passkey-setting").screenshot(
            path="test-artifacts/passkeys-admin-setting-desktop.png"
        )
        await page.set_viewport_size(PHONE)
        await page.locator("#passkey-setting").screenshot(
            path="test-artifacts/passkeys-admin-setting-phone.png"
        )
    async with ctx.reading() as uow:
        assert await service.get_passkey_for(uow.passkeys, uuid.UUID(site.org.id)) == "all"
