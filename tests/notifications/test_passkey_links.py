"""A request that needs the approver's passkey (docs/passkeys.md) is decided on its page
only: its mail carries the page's link and no one-click links, and a one-click link mailed
before the org asked for passkeys no longer decides; on both databases."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from signoff.app import create_app
from signoff.context import AppContext
from signoff.passkeys import service as passkeys
from signoff.wiring import Wiring
from tests.conftest import Org
from tests.dashboard.support import browser_client
from tests.notifications.support import MailBox
from tests.notifications.test_link_page import mailed_link

pytestmark = pytest.mark.anyio


@pytest.fixture
async def app(ctx: AppContext, wiring: Wiring) -> AsyncIterator[Any]:
    application = create_app(ctx.settings, wiring=wiring, background=False)
    async with application.router.lifespan_context(application):
        yield application


@pytest.fixture
async def api(app: Any) -> AsyncIterator[httpx.AsyncClient]:
    async with browser_client(app) as http:
        yield http


async def _require(ctx: AppContext, org: Org, value: str) -> None:
    async with ctx.transaction() as uow:
        await passkeys.set_passkey_for(uow.passkeys, uuid.UUID(org.id), value)


async def test_a_critical_request_is_mailed_with_its_page_link_only(
    api: httpx.AsyncClient, ctx: AppContext, wiring: Wiring, org: Org, mailbox: MailBox
) -> None:
    await _require(ctx, org, "critical")
    with pytest.raises(AssertionError):
        await mailed_link(api, wiring, org, mailbox, priority="critical")
    mail = mailbox.mails[-1]
    assert "/links/" not in mail.text and "/links/" not in mail.html
    assert "/requests/" in mail.text
    # Another priority keeps its one-click links.
    path, _ = await mailed_link(api, wiring, org, mailbox, priority="high")
    assert path.startswith("/links/")


async def test_a_link_mailed_before_the_setting_no_longer_decides(
    api: httpx.AsyncClient, ctx: AppContext, wiring: Wiring, org: Org, mailbox: MailBox
) -> None:
    path, created = await mailed_link(api, wiring, org, mailbox, priority="critical")
    await _require(ctx, org, "critical")
    page = await api.get(path)
    assert page.status_code == 403
    assert "Passkey needed" in page.text
    assert f'href="/requests/{created["id"]}"' in page.text
    confirmed = await api.post(path)
    assert confirmed.status_code == 403
    read = await api.get(f"/api/v1/approvals/{created['id']}", headers=org.admin.headers)
    assert read.json()["status"] == "pending"


async def test_a_request_a_policy_rule_signs_with_a_passkey_is_mailed_with_its_page_only(
    api: httpx.AsyncClient, wiring: Wiring, org: Org, mailbox: MailBox
) -> None:
    rule = {"name": "payments", "condition": "request.action_type == 'payment'"}
    rule |= {"effect": "require", "required_approvals": 1, "passkey": True}
    saved = await api.put("/api/v1/policies", json={"rules": [rule]}, headers=org.admin.headers)
    assert saved.status_code == 200, saved.text
    with pytest.raises(AssertionError):
        await mailed_link(api, wiring, org, mailbox, action_type="payment")
    mail = mailbox.mails[-1]
    assert "/links/" not in mail.text and "/requests/" in mail.text
    path, _ = await mailed_link(api, wiring, org, mailbox, action_type="deploy")
    assert path.startswith("/links/")
