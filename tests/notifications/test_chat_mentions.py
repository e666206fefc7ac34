"""A request's text may ping nobody and make no link in a chat: titles, descriptions and
metadata full of Slack, Teams and Discord mention and link syntax, checked in the JSON
bodies actually posted to loopback receivers (single messages and digests)."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest
from bench.receiver import Received, Receiver

from signoff.common.time import utcnow
from signoff.context import AppContext
from signoff.notifications.routing.document import RequestFacts
from signoff.notifications.sending import messages
from signoff.wiring import Wiring
from tests.conftest import Org, create_approval
from tests.notifications.support import (
    check_discord_message,
    check_slack_message,
    check_teams_message,
)

pytestmark = pytest.mark.anyio

ZWSP = "\u200b"
TITLE = (
    "Ship <!channel> <@U123> <http://evil.example|click> & [x](http://evil.example) "
    "@everyone <at>Boss</at>"
)
DESCRIPTION = (
    "<!here> <!everyone> <#C123> <!subteam^S1|@ops> @here <@123> <@!7> <@&9> <#5> "
    "<b>bold</b> [y][ref] <AT>Chief</AT>"
)
METADATA = {"<!channel>": "<@U123> [z](http://evil.example)", "note": "@everyone <at>X</at>"}
# Slack's control sequences as a request's text may carry them: none may reach Slack raw.
SLACK_SEQUENCES = (
    "<!channel>",
    "<!here>",
    "<!everyone>",
    "<@U123>",
    "<#C123>",
    "<!subteam^",
    "<http://evil",
)
# Keys whose values are not text shown to anyone (ids, URLs, enums); a Slack button's
# ``value`` is the request's id (a Teams fact's or a Discord field's is shown).
NOT_TEXT = {"url", "action_id", "block_id", "type", "style", "$schema", "contentType"}


def texts(payload: Any) -> Iterator[str]:
    """Every string of a payload a person is shown."""
    if isinstance(payload, dict):
        for key, value in payload.items():
            if key not in NOT_TEXT and not (key == "value" and "action_id" in payload):
                yield from texts(value)
    elif isinstance(payload, list):
        for value in payload:
            yield from texts(value)
    elif isinstance(payload, str):
        yield payload


def check_slack_inert(payload: dict[str, Any]) -> str:
    """No raw control sequence anywhere; the only ``<`` are signoff's own links. Answers
    all the text, joined."""
    shown = list(texts(payload))
    for text in shown:
        for sequence in SLACK_SEQUENCES:
            assert sequence not in text, (sequence, text)
        assert re.findall(r"<(?!http://signoff\.test/)", text) == [], text
    return "\n".join(shown)


def check_teams_inert(payload: dict[str, Any]) -> str:
    shown = "\n".join(texts(payload))
    assert re.findall(r"<(?!\u200b)", shown) == [], shown  # no tag: no <at> mention, no HTML
    assert re.findall(r"\]\((?!http://signoff\.test/)", shown) == [], shown
    assert "](http://evil" not in shown and "][ref]" not in shown
    return shown


def check_discord_inert(payload: dict[str, Any]) -> str:
    assert payload["allowed_mentions"] == {"parse": []}
    shown = "\n".join(texts(payload))
    assert re.findall(r"@(?=everyone|here)", shown) == [], shown
    assert re.findall(r"<(?=[@#])", shown) == [], shown
    assert re.findall(r"\]\((?!http://signoff\.test/)", shown) == [], shown
    assert "][ref]" not in shown
    return shown


async def route_chats(
    api: httpx.AsyncClient, org: Org, slack: str, teams: str, discord: str
) -> None:
    document = {
        "channels": {
            "s": {"type": "slack", "webhook_url": slack},
            "t": {"type": "teams", "webhook_url": teams},
            "d": {"type": "discord", "webhook_url": discord},
        },
        "rules": [{"channels": ["s", "t", "d"]}],
    }
    answer = await api.put("/api/v1/routing", json=document, headers=org.admin.headers)
    assert answer.status_code == 200, answer.text


def body_of(received: Received) -> dict[str, Any]:
    payload: dict[str, Any] = orjson.loads(received.body)
    return payload


async def test_mentions_and_links_in_a_request_reach_no_chat_raw(
    api: httpx.AsyncClient, ctx: AppContext, wiring: Wiring, org: Org
) -> None:
    async with Receiver() as slack, Receiver() as teams, Receiver() as discord:
        await route_chats(api, org, slack.url, teams.url, discord.url)
        await create_approval(
            api, org.member, title=TITLE, description=DESCRIPTION, metadata=METADATA
        )
        assert await wiring.notifications.run_once() == 3
        [slack_call], [teams_call], [discord_call] = (
            slack.received,
            teams.received,
            discord.received,
        )

    message = body_of(slack_call)
    check_slack_message(message)
    shown = check_slack_inert(message)
    # The top-level text (notifications, previews) is escaped as the blocks are.
    assert message["text"] == (
        "Approval requested: Ship &lt;!channel&gt; &lt;@U123&gt; "
        "&lt;http://evil.example|click&gt; &amp; [x](http://evil.example) @everyone "
        "&lt;at&gt;Boss&lt;/at&gt;"
    )
    assert "&lt;!subteam^S1|@ops&gt;" in shown and "*&lt;!channel&gt;*" in shown

    card = body_of(teams_call)
    check_teams_message(card)
    shown = check_teams_inert(card)
    assert f"<{ZWSP}at>Boss<{ZWSP}/at>" in shown and f"<{ZWSP}b>bold" in shown
    assert f"[x]{ZWSP}(http://evil.example)" in shown

    embed = body_of(discord_call)
    check_discord_message(embed)
    shown = check_discord_inert(embed)
    assert f"@{ZWSP}everyone" in shown and f"<{ZWSP}@&9>" in shown
    assert f"<{ZWSP}#5>" in shown and f"[z]{ZWSP}(http://evil.example)" in shown


async def test_digests_list_such_titles_inert(
    api: httpx.AsyncClient, ctx: AppContext, wiring: Wiring, org: Org
) -> None:
    async with Receiver() as slack, Receiver() as teams, Receiver() as discord:
        await route_chats(api, org, slack.url, teams.url, discord.url)
        for suffix in ("1", "2"):
            await create_approval(api, org.member, title=TITLE + suffix, description=DESCRIPTION)
        assert await wiring.notifications.run_once() == 6
        [slack_call], [teams_call], [discord_call] = (
            slack.received,
            teams.received,
            discord.received,
        )

    digest = body_of(slack_call)
    check_slack_message(digest)
    assert digest["text"] == "2 requests wait for a decision"
    shown = check_slack_inert(digest)
    assert "|Ship &lt;!channel&gt; &lt;@U123&gt;" in shown

    card = body_of(teams_call)
    check_teams_message(card)
    shown = check_teams_inert(card)
    assert shown.count("[Open](http://signoff.test/requests/") == 2

    embeds = body_of(discord_call)
    check_discord_message(embeds)
    assert len(embeds["embeds"]) == 2
    check_discord_inert(embeds)


def test_a_cut_slack_text_never_ends_in_half_an_entity() -> None:
    # A title of ampersands escapes to five times its length: the digest's 150 characters
    # end before an entity, never inside one (``&am…`` would show as typed garbage).
    facts = RequestFacts(
        id=uuid.uuid4(),
        org_id=uuid.uuid4(),
        title="&" * 200,
        description="<" * 1000,
        priority="low",
        action_type=None,
        source=None,
        metadata={},
        has_steps=False,
        created_at=utcnow(),
        expires_at=None,
    )
    item = messages.Item(facts, "created", messages.Links("http://signoff.test/r", None, None))
    digest = messages.slack_payload([item, item], interactive=False)
    label = digest["blocks"][1]["text"]["text"].split("|", 1)[1].split(">", 1)[0]
    assert label == "&amp;" * 29 + "…"
    single = messages.slack_payload([item], interactive=False)
    section = single["blocks"][1]["text"]["text"]
    assert len(section) <= 3000 and section.endswith("&lt;…")
    assert re.fullmatch(r"(\*(&amp;)+\*\n)(&lt;)+…", section)
