"""Deciding inside Slack: /integrations/slack/interactions against a loopback fake of
Slack's Web API (users.info) and of the message's response_url."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import parse_qs, urlencode

import httpx
import orjson
import pytest
from bench.receiver import Received, Receiver, Reply
from sqlalchemy import update

from signoff.context import AppContext
from signoff.models import User
from signoff.notifications.decisions.slack import slack_signature
from signoff.wiring import Wiring
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


async def setup(
    api: httpx.AsyncClient,
    wiring: Wiring,
    org: Org,
    webhook: str,
    rule: dict[str, Any] | None = None,
    **approval: Any,
) -> str:
    """An org whose one rule (``rule`` added to it) posts to a Slack app's channel, and
    one request (``approval`` overrides its body), sent."""
    document = {
        "channels": {
            "team": {
                "type": "slack",
                "webhook_url": webhook,
                "bot_token": BOT_TOKEN,
                "signing_secret": SIGNING_SECRET,
            }
        },
        "rules": [{"channels": ["team"], **(rule or {})}],
    }
    response = await api.put("/api/v1/routing", json=document, headers=org.admin.headers)
    assert response.status_code == 200, response.text
    created = await create_approval(api, org.admin, **approval)
    await wiring.notifications.run_once()
    return str(created["id"])


async def test_a_signed_press_decides_and_updates_the_message(
    api: httpx.AsyncClient, ctx: AppContext, wiring: Wiring, org: Org
) -> None:
    async with Receiver() as webhook, Receiver() as response_url:
        request_id = await setup(api, wiring, org, webhook.url)
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
    api: httpx.AsyncClient, ctx: AppContext, wiring: Wiring, org: Org
) -> None:
    async with Receiver() as webhook, Receiver() as response_url:
        request_id = await setup(api, wiring, org, webhook.url)
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
    api: httpx.AsyncClient, ctx: AppContext, wiring: Wiring, org: Org
) -> None:
    async with Receiver() as webhook, Receiver() as response_url:
        request_id = await setup(api, wiring, org, webhook.url)
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


async def test_a_critical_request_under_the_setting_gets_a_sign_in_link_not_deciding_buttons(
    api: httpx.AsyncClient, ctx: AppContext, wiring: Wiring, org: Org
) -> None:
    async with Receiver() as webhook:
        request_id = await setup(api, wiring, org, webhook.url, priority="critical")
        [posted] = webhook.received
    message = orjson.loads(posted.body)
    check_slack_message(message)
    elements = [e for b in message["blocks"] if b["type"] == "actions" for e in b["elements"]]
    # Every button opens the request page (sign-in first); none asks to decide.
    assert elements and all(
        e["url"] == f"http://signoff.test/requests/{request_id}" for e in elements
    )
    assert not {e["action_id"] for e in elements} & {"approve", "reject"}
    assert "sign in to signoff to decide" in posted.body.decode()


async def test_a_press_deciding_a_critical_request_in_place_is_refused_with_a_link(
    api: httpx.AsyncClient, ctx: AppContext, wiring: Wiring, org: Org, slack_api: Receiver
) -> None:
    # A forged press (or one on a message older than the setting): signed by the app, it
    # asks to approve a critical request in place.
    async with Receiver() as webhook, Receiver() as response_url:
        request_id = await setup(api, wiring, org, webhook.url, priority="critical")
        body = press("U_MEMBER", "approve", request_id, response_url.url)
        answer = await api.post(
            "/integrations/slack/interactions", content=body, headers=signed(body)
        )
        assert answer.status_code == 200
        [reply] = await response_url.wait_for(1)
    shown = orjson.loads(reply.body)
    assert shown["response_type"] == "ephemeral" and shown["replace_original"] is False
    page = f"http://signoff.test/requests/{request_id}"
    assert f"<{page}|open it in signoff>" in shown["text"]
    assert slack_buttons(shown)["open"]["url"] == page
    assert slack_api.received == []  # refused before anyone was looked up
    read = await api.get(f"/api/v1/approvals/{request_id}", headers=org.admin.headers)
    assert read.json()["status"] == "pending"
    events = await api.get(f"/api/v1/approvals/{request_id}/events", headers=org.admin.headers)
    assert [e["type"] for e in events.json()["data"]] == ["request.created"]


async def test_with_the_setting_off_critical_requests_decide_in_place_until_it_is_on(
    api: httpx.AsyncClient, ctx: AppContext, wiring: Wiring, org: Org
) -> None:
    off = {"require_sign_in_for_critical": False}
    async with Receiver() as webhook, Receiver() as response_url:
        first = await setup(api, wiring, org, webhook.url, off, priority="critical")
        second = str((await create_approval(api, org.admin, priority="critical"))["id"])
        [posted] = webhook.received
        buttons = slack_buttons(orjson.loads(posted.body))
        assert "url" not in buttons["approve"] and buttons["approve"]["value"] == first
        body = press("U_MEMBER", "approve", first, response_url.url)
        answer = await api.post(
            "/integrations/slack/interactions", content=body, headers=signed(body)
        )
        assert answer.status_code == 200
        [update] = await response_url.wait_for(1)
        assert orjson.loads(update.body)["replace_original"] is True
        # The setting turned on since: the second message's buttons no longer decide.
        await setup(api, wiring, org, webhook.url)
        body = press("U_MEMBER", "approve", second, response_url.url)
        answer = await api.post(
            "/integrations/slack/interactions", content=body, headers=signed(body)
        )
        assert answer.status_code == 200
        [_, refusal] = await response_url.wait_for(2)
    assert orjson.loads(refusal.body)["response_type"] == "ephemeral"
    for request_id, status in ((first, "approved"), (second, "pending")):
        read = await api.get(f"/api/v1/approvals/{request_id}", headers=org.admin.headers)
        assert read.json()["status"] == status


async def test_names_and_titles_reach_slack_escaped_in_messages_and_updates(
    api: httpx.AsyncClient, ctx: AppContext, wiring: Wiring, org: Org
) -> None:
    async with ctx.transaction() as uow:
        await uow.session.execute(
            update(User)
            .where(User.id == uuid.UUID(org.member.user_id))
            .values(name="<!channel> Mallory <http://evil.example|x>")
        )
    title = "Rotate keys <!here> <@U123> & <#C123>"
    async with Receiver() as webhook, Receiver() as response_url:
        request_id = await setup(api, wiring, org, webhook.url, title=title)
        [posted] = webhook.received
        body = press("U_MEMBER", "approve", request_id, response_url.url)
        answer = await api.post(
            "/integrations/slack/interactions", content=body, headers=signed(body)
        )
        assert answer.status_code == 200
        [update_call] = await response_url.wait_for(1)
    message = orjson.loads(posted.body)
    assert message["text"] == (
        "Approval requested: Rotate keys &lt;!here&gt; &lt;@U123&gt; &amp; &lt;#C123&gt;"
    )
    shown = orjson.loads(update_call.body)
    assert shown["text"] == (
        "*&lt;!channel&gt; Mallory &lt;http://evil.example|x&gt;* approved this request."
    )
    for payload in (message, shown):
        check_slack_message({"text": payload["text"], "blocks": payload["blocks"]})
        raw = orjson.dumps(payload).decode()
        for sequence in ("<!channel>", "<!here>", "<@U123>", "<#C123>", "<http://evil"):
            assert sequence not in raw


async def test_a_request_that_needs_a_passkey_gets_a_link_and_a_press_is_refused(
    api: httpx.AsyncClient, ctx: AppContext, wiring: Wiring, org: Org
) -> None:
    """docs/passkeys.md: only the request's page can sign the decision."""
    import uuid

    from signoff.passkeys import service as passkeys

    off = {"require_sign_in_for_critical": False}
    async with ctx.transaction() as uow:
        await passkeys.set_passkey_for(uow.passkeys, uuid.UUID(org.id), "all")
    async with Receiver() as webhook, Receiver() as response_url:
        request_id = await setup(api, wiring, org, webhook.url, off, priority="low")
        [posted] = webhook.received
        elements = [
            e
            for b in orjson.loads(posted.body)["blocks"]
            if b["type"] == "actions"
            for e in b["elements"]
        ]
        assert elements and not {e["action_id"] for e in elements} & {"approve", "reject"}
        body = press("U_MEMBER", "approve", request_id, response_url.url)
        answer = await api.post(
            "/integrations/slack/interactions", content=body, headers=signed(body)
        )
        assert answer.status_code == 200
        [reply] = await response_url.wait_for(1)
    shown = orjson.loads(reply.body)
    assert shown["response_type"] == "ephemeral"
    assert f"http://signoff.test/requests/{request_id}" in shown["text"]
    assert "passkey" in shown["text"]
    read = await api.get(f"/api/v1/approvals/{request_id}", headers=org.admin.headers)
    assert read.json()["status"] == "pending"


async def test_a_request_a_policy_rule_signs_with_a_passkey_gets_a_link_and_a_press_is_refused(
    api: httpx.AsyncClient, ctx: AppContext, wiring: Wiring, org: Org
) -> None:
    """docs/policies.md: a rule with ``passkey: true`` makes its requests decided on their
    page only; a press in Slack (a forged one, or on an older message) decides nothing."""
    rule = {
        "name": "payments",
        "condition": "request.action_type == 'payment'",
        "effect": "require",
        "required_approvals": 1,
        "passkey": True,
    }
    saved = await api.put("/api/v1/policies", json={"rules": [rule]}, headers=org.admin.headers)
    assert saved.status_code == 200, saved.text
    off = {"require_sign_in_for_critical": False}
    async with Receiver() as webhook, Receiver() as response_url:
        request_id = await setup(api, wiring, org, webhook.url, off, action_type="payment")
        [posted] = webhook.received
        buttons = slack_buttons(orjson.loads(posted.body))
        # The message only opens the page: no button decides.
        assert buttons and not set(buttons) & {"approve", "reject"}
        body = press("U_MEMBER", "approve", request_id, response_url.url)
        answer = await api.post(
            "/integrations/slack/interactions", content=body, headers=signed(body)
        )
        assert answer.status_code == 200
        [reply] = await response_url.wait_for(1)
    shown = orjson.loads(reply.body)
    assert shown["response_type"] == "ephemeral" and shown["replace_original"] is False
    assert f"http://signoff.test/requests/{request_id}" in shown["text"]
    assert "passkey" in shown["text"]
    read = await api.get(f"/api/v1/approvals/{request_id}", headers=org.admin.headers)
    assert read.json()["status"] == "pending"
    events = await api.get(f"/api/v1/approvals/{request_id}/events", headers=org.admin.headers)
    assert "request.approved" not in [e["type"] for e in events.json()["data"]]
