"""Deciding inside Slack: /integrations/slack/interactions against a loopback fake of
Slack's Web API (users.info) and of the message's response_url."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import parse_qs, urlencode

import httpx
import orjson
import pytest
from bench.receiver import Received, Receiver, Reply

from signoff.context import AppContext
from signoff.notifications.slack import slack_signature
from tests.conftest import Org, create_approval
from tests.notifications.support import MailBox, check_slack_message, slack_buttons

pytestmark = pytest.mark.anyio

SIGNING_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
BOT_TOKEN = "xoxb-17653672481-19874698323-pdFZKVeTuE8sk7oOcBrzbqgy"
SLACK_USERS = {"U_MEMBER": "member1@acme.example", "U_STRANGER": "nobody@elsewhere.example"}


def fake_slack_api(request: Received) -> Reply:
    """users.info as Slack answers it: the profile's e-mail, or ok=false."""
    assert request.path == "/api/users.info"
    assert request.headers["authorization"] == f"Bearer {BOT_TOKEN}"
    user = parse_qs(request.body.decode())["user"][0]
    if user not in SLACK_USERS:
        return Reply(200, orjson.dumps({"ok": False, "error": "user_not_found"}))
    body = {"ok": True, "user": {"id": user, "profile": {"email": SLACK_USERS[user]}}}
    return Reply(200, orjson.dumps(body), {"Content-Type": "application/json"})


@pytest.fixture
async def slack_api() -> AsyncIterator[Receiver]:
    async with Receiver(script=fake_slack_api) as receiver:
        yield receiver


@pytest.fixture
def settings_overrides(smtp: tuple[MailBox, str], slack_api: Receiver) -> dict[str, Any]:
    return {
        "smtp_url": smtp[1],
        "public_url": "http://signoff.test",
        "slack_api_url": f"http://127.0.0.1:{slack_api.port}/api",
    }


def signed(body: bytes, *, age: int = 0, secret: str = SIGNING_SECRET) -> dict[str, str]:
    timestamp = str(int(time.time()) - age)
    return {
        "X-Slack-Request-Timestamp": timestamp,
        "X-Slack-Signature": slack_signature(secret, timestamp, body),
        "Content-Type": "application/x-www-form-urlencoded",
    }


def press(user: str, action: str, request_id: str, response_url: str) -> bytes:
    payload = {
        "type": "block_actions",
        "user": {"id": user, "username": user.lower()},
        "actions": [
            {"action_id": action, "block_id": f"signoff:{request_id}", "value": request_id}
        ],
        "response_url": response_url,
    }
    return urlencode({"payload": orjson.dumps(payload).decode()}).encode()


async def setup(api: httpx.AsyncClient, ctx: AppContext, org: Org, webhook: str) -> str:
    document = {
        "channels": {
            "team": {
                "type": "slack",
                "webhook_url": webhook,
                "bot_token": BOT_TOKEN,
                "signing_secret": SIGNING_SECRET,
            }
        },
        "rules": [{"channels": ["team"]}],
    }
    response = await api.put("/api/v1/routing", json=document, headers=org.admin.headers)
    assert response.status_code == 200, response.text
    created = await create_approval(api, org.admin)
    await ctx.notifications.run_once()
    return str(created["id"])


async def test_a_signed_press_decides_and_updates_the_message(
    api: httpx.AsyncClient, ctx: AppContext, org: Org
) -> None:
    async with Receiver() as webhook, Receiver() as response_url:
        request_id = await setup(api, ctx, org, webhook.url)
        [posted] = webhook.received
        message = orjson.loads(posted.body)
        check_slack_message(message)
        buttons = slack_buttons(message)
        # With the app configured, Approve and Reject decide in Slack (no link).
        assert "url" not in buttons["approve"] and buttons["approve"]["value"] == request_id

        body = press("U_MEMBER", "approve", request_id, response_url.url)
        answer = await api.post(
            "/integrations/slack/interactions", content=body, headers=signed(body)
        )
        assert answer.status_code == 200
        [update] = await response_url.wait_for(1)

    read = await api.get(f"/api/v1/approvals/{request_id}", headers=org.admin.headers)
    assert read.json()["status"] == "approved"
    assert read.json()["decided_by"] == org.member.user_id
    events = await api.get(f"/api/v1/approvals/{request_id}/events", headers=org.admin.headers)
    [decided] = [e for e in events.json()["data"] if e["type"] == "request.approved"]
    assert decided["data"]["via"] == "slack"
    shown = orjson.loads(update.body)
    assert shown["replace_original"] is True
    assert "Member 1" in shown["text"] and "approved" in shown["text"]
    check_slack_message({"text": shown["text"], "blocks": shown["blocks"]})
    assert not [b for b in shown["blocks"] if b["type"] == "actions"]


async def test_bad_signatures_and_stale_timestamps_get_401(
    api: httpx.AsyncClient, ctx: AppContext, org: Org
) -> None:
    async with Receiver() as webhook, Receiver() as response_url:
        request_id = await setup(api, ctx, org, webhook.url)
        body = press("U_MEMBER", "approve", request_id, response_url.url)
        for headers in (
            signed(body, secret="not-the-secret"),
            signed(body, age=301),
            {"Content-Type": "application/x-www-form-urlencoded"},
        ):
            answer = await api.post(
                "/integrations/slack/interactions", content=body, headers=headers
            )
            assert answer.status_code == 401, answer.text
            assert answer.json()["error"]["code"] == "UNAUTHORIZED"
        tampered = body.replace(b"approve", b"reject")
        answer = await api.post(
            "/integrations/slack/interactions", content=tampered, headers=signed(body)
        )
        assert answer.status_code == 401
        assert response_url.received == []
    read = await api.get(f"/api/v1/approvals/{request_id}", headers=org.admin.headers)
    assert read.json()["status"] == "pending"


async def test_an_unknown_slack_user_gets_an_ephemeral_refusal(
    api: httpx.AsyncClient, ctx: AppContext, org: Org
) -> None:
    async with Receiver() as webhook, Receiver() as response_url:
        request_id = await setup(api, ctx, org, webhook.url)
        for user in ("U_STRANGER", "U_NOBODY"):
            body = press(user, "reject", request_id, response_url.url)
            answer = await api.post(
                "/integrations/slack/interactions", content=body, headers=signed(body)
            )
            assert answer.status_code == 200
        refusals = await response_url.wait_for(2)
    for refusal in refusals:
        shown = orjson.loads(refusal.body)
        assert shown["response_type"] == "ephemeral" and shown["replace_original"] is False
        assert "not a signoff user" in shown["text"]
    read = await api.get(f"/api/v1/approvals/{request_id}", headers=org.admin.headers)
    assert read.json()["status"] == "pending"
