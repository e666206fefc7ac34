"""Messages about a request name it by its number in the org (``#2``), beside its title:
in the e-mail (text and HTML), and in Slack's, Teams' and Discord's messages."""

from __future__ import annotations

import httpx
import pytest
from bench.receiver import Receiver

from signoff.context import AppContext
from signoff.wiring import Wiring
from tests.conftest import Org, create_approval
from tests.notifications.support import MailBox
from tests.notifications.test_flow import put_routing, routing

pytestmark = pytest.mark.anyio


async def test_every_message_names_the_request_by_its_number(
    api: httpx.AsyncClient, ctx: AppContext, wiring: Wiring, org: Org, mailbox: MailBox
) -> None:
    async with Receiver() as slack, Receiver() as teams, Receiver() as discord:
        await put_routing(api, org, routing(slack.url, teams.url, discord.url))
        await create_approval(api, org.member, title="Not routed", priority="low")
        second = await create_approval(api, org.member, action_type="deploy.production")
        assert second["number"] == 2
        assert await wiring.notifications.run_once() == 4
        [mail] = mailbox.mails
        bodies = [call.body.decode() for call in (*slack.received, *teams.received)]
        bodies += [call.body.decode() for call in discord.received]

    assert "Request: #2" in mail.text
    assert "#2" in mail.html
    assert len(bodies) == 3
    for body in bodies:
        assert "#2" in body, body
