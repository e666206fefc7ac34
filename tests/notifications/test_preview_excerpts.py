"""A request's preview in its messages: the first lines, cut short, as inert text, and
the link to the page that shows it whole; on SQLite and PostgreSQL."""

from __future__ import annotations

import httpx
import orjson
import pytest
from bench.receiver import Receiver

from signoff.wiring import Wiring
from tests.conftest import Org, create_approval
from tests.notifications.support import MailBox
from tests.notifications.test_flow import put_routing, routing

pytestmark = pytest.mark.anyio

SQL = "\n".join(
    [
        "-- <!channel> <@U123> ```",
        "DELETE FROM accounts WHERE note = '<script>alert(1)</script>'",
        *(f"  AND id <> {n}" for n in range(30)),
    ]
)


async def test_mail_slack_teams_and_discord_carry_an_inert_excerpt(
    api: httpx.AsyncClient, wiring: Wiring, org: Org, mailbox: MailBox
) -> None:
    async with Receiver() as slack, Receiver() as teams, Receiver() as discord:
        await put_routing(api, org, routing(slack.url, teams.url, discord.url))
        created = await create_approval(
            api,
            org.member,
            action_type="deploy.production",
            preview={"kind": "sql", "content": SQL},
        )
        assert await wiring.notifications.run_once() == 4
        [mail] = mailbox.mails
        [slack_call] = slack.received
        [teams_call] = teams.received
        [discord_call] = discord.received
    page = f"http://signoff.test/requests/{created['id']}"

    assert "Preview (SQL):\n  -- <!channel> <@U123> ```\n  DELETE FROM accounts" in mail.text
    assert "AND id <> 5" in mail.text and "AND id <> 29" not in mail.text  # first lines
    assert f"(The whole preview is on the request's page: {page})" in mail.text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in mail.html
    assert "<script>" not in mail.html
    assert f'<a href="{page}">See the whole preview</a>' in mail.html

    blocks = orjson.loads(slack_call.body)["blocks"]
    [excerpt] = [b for b in blocks if "Preview (SQL)" in str(b)]
    text = excerpt["text"]["text"]
    assert text.startswith(f"*Preview (SQL)* · <{page}|see it whole>\n```")
    assert text.endswith("```") and text.count("```") == 2  # its own backticks are broken
    assert "&lt;!channel&gt; &lt;@U123&gt;" in text and "<!channel>" not in text
    assert "&lt;script&gt;" in text and "AND id &lt;&gt; 29" not in text

    card = orjson.loads(teams_call.body)["attachments"][0]["content"]
    shown = [block["text"] for block in card["body"] if block.get("fontType") == "Monospace"]
    assert len(shown) == 1 and "DELETE FROM accounts" in shown[0]
    assert "<script>" not in shown[0]  # a tag would not pass for markup

    [embed] = orjson.loads(discord_call.body)["embeds"]
    [field] = [f for f in embed["fields"] if f["name"] == "Preview (SQL)"]
    assert field["value"].startswith("```") and field["value"].count("```") == 2
    assert "<\u200b@U123>" in field["value"]


async def test_messages_of_a_request_without_a_preview_have_no_excerpt(
    api: httpx.AsyncClient, wiring: Wiring, org: Org, mailbox: MailBox
) -> None:
    async with Receiver() as slack, Receiver() as teams, Receiver() as discord:
        await put_routing(api, org, routing(slack.url, teams.url, discord.url))
        await create_approval(api, org.member, action_type="deploy.production")
        assert await wiring.notifications.run_once() == 4
        [mail] = mailbox.mails
        [slack_call] = slack.received
    assert "Preview" not in mail.text and "Preview" not in mail.html
    assert "Preview" not in slack_call.body.decode()
