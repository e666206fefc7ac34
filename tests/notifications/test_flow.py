"""A request that matches a rule: one e-mail over real SMTP, one Slack message, one Teams
card and one Discord embed at loopback receivers; the notification log; one-click links."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import httpx
import orjson
import pytest
from bench.receiver import Receiver

from signoff.context import AppContext
from signoff.wiring import Wiring
from tests.conftest import Org, assert_error, create_approval
from tests.notifications.support import (
    MailBox,
    check_discord_message,
    check_slack_message,
    check_teams_message,
    slack_buttons,
)

pytestmark = pytest.mark.anyio


def routing(slack: str, teams: str, discord: str, **rule: Any) -> dict[str, Any]:
    return {
        "channels": {
            "mail": {"type": "email"},
            "ops-slack": {"type": "slack", "webhook_url": slack},
            "ops-teams": {"type": "teams", "webhook_url": teams},
            "ops-discord": {"type": "discord", "webhook_url": discord},
        },
        "rules": [
            {
                "name": "deploys",
                "match": {"action_type": "deploy.*", "priority": ["high", "critical"]},
                "channels": ["mail", "ops-slack", "ops-teams", "ops-discord"],
                "audience": {"users": ["member1@acme.example"]},
                **rule,
            }
        ],
    }


async def put_routing(api: httpx.AsyncClient, org: Org, document: dict[str, Any]) -> Any:
    response = await api.put("/api/v1/routing", json=document, headers=org.admin.headers)
    assert response.status_code == 200, response.text
    return response.json()


async def test_a_matching_request_reaches_every_channel_once(
    api: httpx.AsyncClient, ctx: AppContext, wiring: Wiring, org: Org, mailbox: MailBox
) -> None:
    async with Receiver() as slack, Receiver() as teams, Receiver() as discord:
        await put_routing(api, org, routing(slack.url, teams.url, discord.url))
        created = await create_approval(
            api,
            org.member,
            action_type="deploy.production",
            source="github",
            metadata={"service": "billing", "version": "2.4.1"},
        )
        assert await wiring.notifications.run_once() == 4
        [mail] = mailbox.mails
        [slack_call] = slack.received
        [teams_call] = teams.received
        [discord_call] = discord.received

    assert mail.recipients == ["member1@acme.example"]
    assert "Deploy v2 to production" in mail.message["Subject"]
    for part in (mail.text, mail.html):
        assert "Rolls out the new billing service" in part
        assert "github" in part and "high" in part and "2.4.1" in part
        assert f"http://signoff.test/requests/{created['id']}" in part
    approve, reject = mail.link("Approve"), mail.link("Reject")
    assert approve.startswith("http://signoff.test/links/") and approve != reject
    assert approve in mail.html and reject in mail.html

    slack_body = orjson.loads(slack_call.body)
    check_slack_message(slack_body)
    buttons = slack_buttons(slack_body)
    assert set(buttons) == {"approve", "reject", "open"}
    assert buttons["open"]["url"] == f"http://signoff.test/requests/{created['id']}"
    assert buttons["approve"]["url"].startswith("http://signoff.test/links/")

    check_teams_message(orjson.loads(teams_call.body))
    check_discord_message(orjson.loads(discord_call.body))

    log = await api.get(
        f"/api/v1/approvals/{created['id']}/notifications", headers=org.member.headers
    )
    assert log.status_code == 200
    rows = log.json()["data"]
    assert sorted((r["channel"], r["recipient"], r["status"]) for r in rows) == [
        ("mail", "member1@acme.example", "sent"),
        ("ops-discord", "ops-discord", "sent"),
        ("ops-slack", "ops-slack", "sent"),
        ("ops-teams", "ops-teams", "sent"),
    ]
    assert all(r["kind"] == "created" and r["attempts"] == 1 for r in rows)


async def test_a_create_wakes_the_sender_once_committed(
    api: httpx.AsyncClient, ctx: AppContext, wiring: Wiring, org: Org, mailbox: MailBox
) -> None:
    # The sender then sends within moments, not at its next poll. On SQLite the create's
    # transaction is shared with other writers (group commit), which once hid its mark.
    await put_routing(
        api, org, {"channels": {"mail": {"type": "email"}}, "rules": [{"channels": ["mail"]}]}
    )
    wiring.notifications.wakeup.clear()
    await create_approval(api, org.member)
    assert wiring.notifications.wakeup.is_set()
    assert await wiring.notifications.run_once() == len(mailbox.mails) > 0


async def test_requests_no_rule_matches_notify_nobody(
    api: httpx.AsyncClient, ctx: AppContext, wiring: Wiring, org: Org, mailbox: MailBox
) -> None:
    async with Receiver() as slack:
        await put_routing(api, org, routing(slack.url, slack.url, slack.url))
        created = await create_approval(api, org.member, action_type="billing.refund")
        assert await wiring.notifications.run_once() == 0
    assert mailbox.mails == [] and slack.received == []
    log = await api.get(
        f"/api/v1/approvals/{created['id']}/notifications", headers=org.member.headers
    )
    assert log.json() == {"data": []}


async def test_one_click_link_gets_never_decide_and_post_decides_once(
    api: httpx.AsyncClient, ctx: AppContext, wiring: Wiring, org: Org, mailbox: MailBox
) -> None:
    async with Receiver() as chat:
        await put_routing(api, org, routing(chat.url, chat.url, chat.url))
        created = await create_approval(api, org.member, action_type="deploy.web")
        await wiring.notifications.run_once()
    path = urlsplit(mailbox.mails[0].link("Approve")).path

    for _ in range(10):  # a mail scanner, a link preview, the person twice...
        page = await api.get(path)
        assert page.status_code == 200
        assert "Confirm: approve" in page.text and "Deploy v2 to production" in page.text
    read = await api.get(f"/api/v1/approvals/{created['id']}", headers=org.admin.headers)
    assert read.json()["status"] == "pending"

    confirmed = await api.post(path)
    assert confirmed.status_code == 200 and "You approved this request" in confirmed.text
    read = await api.get(f"/api/v1/approvals/{created['id']}", headers=org.admin.headers)
    assert read.json()["status"] == "approved"
    assert read.json()["decided_by"] == org.member.user_id
    events = await api.get(f"/api/v1/approvals/{created['id']}/events", headers=org.admin.headers)
    [decided] = [e for e in events.json()["data"] if e["type"] == "request.approved"]
    assert decided["data"]["via"] == "email"

    again = await api.post(path)
    assert again.status_code == 410 and "Link already used" in again.text
    looked = await api.get(path)
    assert looked.status_code == 410 and "Link already used" in looked.text


async def test_foreign_unknown_and_channel_links_get_clear_pages(
    api: httpx.AsyncClient, ctx: AppContext, wiring: Wiring, org: Org, mailbox: MailBox
) -> None:
    async with Receiver() as chat:
        await put_routing(api, org, routing(chat.url, chat.url, chat.url))
        await create_approval(api, org.member, action_type="deploy.web")
        await wiring.notifications.run_once()
        slack_body = next(orjson.loads(r.body) for r in chat.received if b'"blocks"' in r.body)
    unknown = await api.get("/links/" + "x" * 43)
    assert unknown.status_code == 404 and "Link not valid" in unknown.text
    assert "Traceback" not in unknown.text
    # A link posted to a channel acts for whoever signs in, never for the token alone.
    channel_link = urlsplit(slack_buttons(slack_body)["approve"]["url"]).path
    page = await api.get(channel_link)
    assert page.status_code == 200 and "Sign in" in page.text
    refused = await api.post(channel_link)
    assert refused.status_code == 200 and "Sign in" in refused.text


async def test_routing_is_for_admins_and_put_names_the_wrong_field(
    api: httpx.AsyncClient, org: Org
) -> None:
    refused = await api.get("/api/v1/routing", headers=org.member.headers)
    assert_error(refused, 403, "FORBIDDEN")
    document = routing("http://127.0.0.1:9/a", "http://127.0.0.1:9/b", "http://127.0.0.1:9/c")
    document["rules"][0]["channels"].append("nowhere")
    details = assert_error(
        await api.put("/api/v1/routing", json=document, headers=org.admin.headers),
        400,
        "VALIDATION_ERROR",
    )
    assert details["fields"] == [
        {"field": "rules.0.channels.4", "message": "names no channel of this document"}
    ]
    document["rules"][0]["channels"].pop()
    document["rules"][0]["match"]["priority"] = ["urgent"]
    details = assert_error(
        await api.put("/api/v1/routing", json=document, headers=org.admin.headers),
        400,
        "VALIDATION_ERROR",
    )
    assert details["fields"][0]["field"] == "rules.0.match.priority.0"


async def test_secrets_are_masked_and_kept_when_sent_back_masked(
    api: httpx.AsyncClient, ctx: AppContext, org: Org
) -> None:
    secret_url = "https://hooks.slack.example/services/T000/B000/abcdefghijkl"
    document = routing(secret_url, secret_url, secret_url)
    shown = await put_routing(api, org, document)
    masked = shown["channels"]["ops-slack"]["webhook_url"]
    assert "abcdefghijkl" not in masked and masked.endswith("ijkl")
    assert masked.startswith("https://hooks.slack.example/")
    raw = await api.get("/api/v1/routing", headers=org.admin.headers)
    assert "services/T000" not in raw.text
    # Sending GET's answer back unchanged keeps every secret.
    again = await put_routing(api, org, raw.json())
    assert again == raw.json()
    async with ctx.reading() as uow:
        from signoff.notifications.repository import NotificationRepository
        from signoff.notifications.routing.service import channel_settings

        channels = await NotificationRepository(uow.session, uow.dialect).channels(
            __import__("uuid").UUID(org.id)
        )
    slack = next(c for c in channels if c.name == "ops-slack")
    assert secret_url not in slack.config_encrypted
    assert channel_settings(ctx.box, slack)["webhook_url"] == secret_url


async def test_the_webhook_channel_sends_a_signed_event(
    api: httpx.AsyncClient, ctx: AppContext, wiring: Wiring, org: Org
) -> None:
    from standardwebhooks.webhooks import Webhook

    secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    async with Receiver() as receiver:
        document = {
            "channels": {"events": {"type": "webhook", "url": receiver.url, "secret": secret}},
            "rules": [{"channels": ["events"], "match": {"priority": ["high"]}}],
        }
        response = await api.put("/api/v1/routing", json=document, headers=org.admin.headers)
        assert response.status_code == 200
        assert secret not in response.text
        created = await create_approval(api, org.member, metadata={"ticket": "OPS-1"})
        await wiring.notifications.run_once()
        [call] = receiver.received
    event = Webhook(secret).verify(call.body, call.headers)
    assert event["type"] == "approval.created"
    assert event["data"]["request_id"] == created["id"]
    assert event["data"]["metadata"] == {"ticket": "OPS-1"}
    assert event["data"]["url"] == f"http://signoff.test/requests/{created['id']}"
