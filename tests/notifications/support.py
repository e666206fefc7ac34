"""Checks of each chat service's documented message shape, and the loopback SMTP server
(``bench/mailserver.py``) the notification tests read mails from."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

import pytest
from bench.mailserver import Mail, MailBox, smtp_server

__all__ = ["Mail", "MailBox", "smtp_server"]


# An org with this routing can notify (it has a channel), so its changes write plan rows;
# its one rule matches no request the tests create, so nothing is ever sent.
CHANNEL_MATCHING_NOTHING = {
    "channels": {"mail": {"type": "email"}},
    "rules": [{"match": {"action_type": "nothing.matches"}, "channels": ["mail"]}],
}


# ---- documented shapes (checked by the receivers' tests) ----

SLACK_BLOCK_TYPES = {"header", "section", "actions", "context", "divider"}


def check_slack_message(payload: dict[str, Any]) -> None:
    """Block Kit as Slack documents it for incoming webhooks: ``text`` as the fallback,
    at most 50 blocks; header plain_text at most 150 chars; section text at most 3000
    and at most 10 fields of 2000; actions hold at most 25 elements; a button has
    plain_text of at most 75 chars, an action_id of at most 255, a url of at most 3000."""
    assert isinstance(payload["text"], str) and payload["text"]
    blocks = payload["blocks"]
    assert 0 < len(blocks) <= 50
    for block in blocks:
        assert block["type"] in SLACK_BLOCK_TYPES, block
        if block["type"] == "header":
            assert block["text"]["type"] == "plain_text"
            assert len(block["text"]["text"]) <= 150
        if block["type"] == "section":
            assert block["text"]["type"] in ("mrkdwn", "plain_text")
            assert len(block["text"]["text"]) <= 3000
            for field in block.get("fields", []):
                assert field["type"] in ("mrkdwn", "plain_text") and len(field["text"]) <= 2000
            assert len(block.get("fields", [])) <= 10
        if block["type"] == "actions":
            assert 0 < len(block["elements"]) <= 25
            assert len(block.get("block_id", "")) <= 255
            for element in block["elements"]:
                assert element["type"] == "button"
                assert element["text"]["type"] == "plain_text"
                assert len(element["text"]["text"]) <= 75
                assert len(element["action_id"]) <= 255
                assert element.get("style") in (None, "primary", "danger")
                if "url" in element:
                    assert element["url"].startswith("http") and len(element["url"]) <= 3000


def slack_buttons(payload: dict[str, Any]) -> dict[str, dict[str, Any]]:
    actions = [b for b in payload["blocks"] if b["type"] == "actions"]
    return {e["action_id"]: e for block in actions for e in block["elements"]}


def check_teams_message(payload: dict[str, Any]) -> None:
    """The incoming-webhook envelope Teams documents for Adaptive Cards: a ``message``
    with one attachment of content type application/vnd.microsoft.card.adaptive whose
    content is the card (type AdaptiveCard, a version, a body of elements)."""
    assert payload["type"] == "message"
    [attachment] = payload["attachments"]
    assert attachment["contentType"] == "application/vnd.microsoft.card.adaptive"
    assert "contentUrl" in attachment and attachment["contentUrl"] is None
    card = attachment["content"]
    assert card["type"] == "AdaptiveCard"
    assert card["$schema"] == "http://adaptivecards.io/schemas/adaptive-card.json"
    assert re.fullmatch(r"1\.\d", card["version"])
    assert card["body"]
    for element in card["body"]:
        assert element["type"] in ("TextBlock", "FactSet", "ColumnSet", "Container")
        if element["type"] == "TextBlock":
            assert isinstance(element["text"], str)
        if element["type"] == "FactSet":
            for fact in element["facts"]:
                assert set(fact) == {"title", "value"}
    for action in card.get("actions", []):
        assert action["type"] == "Action.OpenUrl"
        assert action["title"] and action["url"].startswith("http")


def check_discord_message(payload: dict[str, Any]) -> None:
    """A Discord execute-webhook body: content of at most 2000 chars, at most 10 embeds;
    an embed's title at most 256, description 4096, at most 25 fields (name 256, value
    1024), a colour as an integer, and 6000 characters in all."""
    assert len(payload.get("content", "")) <= 2000
    embeds = payload["embeds"]
    assert 0 < len(embeds) <= 10
    for embed in embeds:
        assert len(embed["title"]) <= 256
        assert len(embed["description"]) <= 4096
        assert isinstance(embed["color"], int)
        assert len(embed["fields"]) <= 25
        total = len(embed["title"]) + len(embed["description"])
        for field in embed["fields"]:
            assert 0 < len(field["name"]) <= 256 and 0 < len(field["value"]) <= 1024
            total += len(field["name"]) + len(field["value"])
        assert total <= 6000
    assert payload["allowed_mentions"] == {"parse": []}


# A loopback SMTP server and its mailbox, as fixtures: imported by the test modules and
# conftest files that need them (the notification tests, the invitation tests).
@pytest.fixture
async def smtp() -> AsyncIterator[tuple[MailBox, str]]:
    async with smtp_server() as server:
        yield server


@pytest.fixture
def mailbox(smtp: tuple[MailBox, str]) -> MailBox:
    return smtp[0]
