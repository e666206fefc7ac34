"""The request's dashboard page lists what was sent about it, to whom, and how it went."""

from __future__ import annotations

import html
import re

import httpx
import pytest
from bench.receiver import Receiver, Reply

from signoff.context import AppContext
from signoff.wiring import Wiring
from tests.conftest import Org, create_approval
from tests.dashboard.support import signed_in
from tests.notifications.support import MailBox

pytestmark = pytest.mark.anyio


def notifications_section(page: str) -> str:
    found = re.search(r'<section[^>]*id="notifications".*?</section>', page, re.DOTALL)
    assert found, page
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", found.group(0))).split())


async def test_the_request_page_shows_each_notification_its_recipient_and_outcome(
    api: httpx.AsyncClient, ctx: AppContext, wiring: Wiring, org: Org, mailbox: MailBox
) -> None:
    async with Receiver(default=Reply(500)) as teams:
        secret_url = f"{teams.url}/webhookb2/SECRET-PATH"
        document = {
            "channels": {
                "mail": {"type": "email"},
                "ops": {"type": "teams", "webhook_url": secret_url},
            },
            "rules": [{"channels": ["mail", "ops"], "audience": {"users": [org.members[1].email]}}],
        }
        saved = await api.put("/api/v1/routing", json=document, headers=org.admin.headers)
        assert saved.status_code == 200, saved.text
        created = await create_approval(api, org.member)
        await signed_in(ctx, api, org.member)
        before = notifications_section((await api.get(f"/requests/{created['id']}")).text)
        assert before.startswith("Notifications 0 None.")  # planned by the worker's round
        await wiring.notifications.run_once()
        [mail] = mailbox.mails
        page = (await api.get(f"/requests/{created['id']}")).text

    shown = notifications_section(page)
    recipient = org.members[1]
    assert shown.startswith("Notifications 2 ")
    assert f"Sent Approval requested to {recipient.name} {recipient.email} by e-mail (mail)" in (
        shown
    )
    assert mail.recipients == [recipient.email]
    assert "Retrying Approval requested to ops by Teams · 1 attempt · next try" in shown
    assert "Last error: non-2xx status" in shown
    assert "1 attempt · sent" in shown
    # The channel's webhook URL is a credential: never on the page.
    assert "SECRET-PATH" not in page and teams.url not in page
    # Exact UTC on hover, shown in the viewer's zone by the page's script.
    assert re.search(r'<time datetime="[^"]+" title="[^"]+UTC[^"]*" data-local=', page)
