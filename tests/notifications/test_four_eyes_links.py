"""Four-eyes holds for one-click mail links too: they decide through the same path."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from signoff.app import create_app
from signoff.context import AppContext
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


async def test_the_requester_s_mail_link_decides_nothing(
    api: httpx.AsyncClient, wiring: Wiring, org: Org, mailbox: MailBox
) -> None:
    forbid = await api.patch(
        "/api/v1/org/settings", headers=org.admin.headers, json={"self_approval": "forbid"}
    )
    assert forbid.status_code == 200
    # Mailed to member1, who asked for it through their own connection.
    path, created = await mailed_link(api, wiring, org, mailbox)
    confirmed = await api.post(path)
    assert "forbids self-approval" in confirmed.text
    assert "You approved this request" not in confirmed.text
    read = await api.get(f"/api/v1/approvals/{created['id']}", headers=org.admin.headers)
    assert read.json()["status"] == "pending"
