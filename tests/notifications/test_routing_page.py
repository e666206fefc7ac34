"""The dashboard's routing editor (admins): the empty state, saving a document, errors
named, and "send a test notification" per channel."""

from __future__ import annotations

import httpx
import orjson
import pytest
from bench.receiver import Receiver

from signoff.context import AppContext
from tests.conftest import Org
from tests.dashboard.support import post_form, signed_in
from tests.notifications.support import MailBox, check_slack_message
from tests.oauth.support import forms_of

pytestmark = pytest.mark.anyio

PAGE = "/settings/notifications"


async def send_test(api: httpx.AsyncClient, channel: str) -> httpx.Response:
    """The row's "Send a test notification" button: the editor's form, posted to the
    button's formaction with the button's name and value."""
    page = await api.get(PAGE)
    button = f'formaction="{PAGE}/test" name="channel" value="{channel}"'
    assert button in page.text
    form = next(f for f in forms_of(page.text) if f["action"] == PAGE)
    return await api.post(PAGE + "/test", data={**form["fields"], "channel": channel})


async def test_admins_edit_the_routing_and_test_each_channel(
    api: httpx.AsyncClient, ctx: AppContext, org: Org, mailbox: MailBox
) -> None:
    await signed_in(ctx, api, org.admin)
    page = await api.get(PAGE)
    assert page.status_code == 200
    assert "No rules: nobody is notified" in page.text

    async with Receiver() as slack:
        document = (
            "channels:\n"
            f"  team: {{type: slack, webhook_url: '{slack.url}'}}\n"
            "  mail: {type: email}\n"
            "rules:\n"
            "  - {channels: [team, mail], match: {priority: [critical]}}\n"
        )
        saved = await post_form(api, PAGE, PAGE, document=document)
        assert saved.status_code == 303
        page = await api.get(PAGE)
        assert "Routing saved." in page.text and "No rules" not in page.text
        assert slack.url not in page.text  # masked

        tested = await send_test(api, "team")
        assert tested.status_code == 303
        assert "Test notification sent to team" in (await api.get(PAGE)).text
        [message] = slack.received
        check_slack_message(orjson.loads(message.body))
        assert b"Test notification from signoff" in message.body

    await send_test(api, "mail")
    [mail] = mailbox.mails
    assert mail.recipients == [org.admin.email]

    wrong = await post_form(api, PAGE, PAGE, document="rules:\n  - {channels: [nowhere]}\n")
    assert wrong.status_code == 400
    assert "rules.0.channels.0" in wrong.text
    assert "nowhere" in wrong.text  # the text typed is kept for fixing


async def test_members_may_not_open_the_routing_editor(
    api: httpx.AsyncClient, ctx: AppContext, org: Org
) -> None:
    await signed_in(ctx, api, org.member)
    page = await api.get(PAGE)
    assert page.status_code == 403
