"""Deciding inside Slack (a Slack app with a bot token and a signing secret).

Slack posts each button press to ``/integrations/slack/interactions``. The request is
verified (``X-Slack-Signature`` v0: HMAC-SHA256 of ``v0:{timestamp}:{body}`` with the
app's signing secret; timestamps older than 5 minutes are refused), acknowledged at
once, and handled afterwards: the Slack user's e-mail comes from ``users.info``, names
a signoff user of the org, who decides through the same services as everywhere else;
the message is then updated through ``response_url`` to show who decided. A refusal
(unknown person, one who may not decide, a request decided already) is an ephemeral
message only the presser sees.

A critical request under ``require_sign_in_for_critical`` is never decided here: its
message carries only a link to the request page, and a press asking to decide it (an
older message, a crafted payload) gets an ephemeral answer with that link instead.

Every text sent to Slack escapes its user-supplied parts (``messages.slack_escape``).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import uuid
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import parse_qs

import httpx
import orjson

from signoff.approvals import service as approvals
from signoff.approvals.schemas import RelayedDecision
from signoff.auth.principal import OrgMember
from signoff.common.ids import parse_id
from signoff.common.time import utcnow
from signoff.config import Settings
from signoff.crypto import SecretBox
from signoff.errors import AppError, PasskeyRequired, RequestNotPending
from signoff.notifications.repository import NotificationRepository
from signoff.notifications.routing.document import (
    RequestFacts,
    RoutingDocument,
    facts_of,
    first_matching_rule,
)
from signoff.notifications.routing.service import channel_settings, load_document
from signoff.notifications.sending import messages
from signoff.unit_of_work import UnitOfWork
from signoff.webhooks.delivery import build_transport
from signoff.webhooks.urlpolicy import AddressPolicy

logger = logging.getLogger(__name__)


class _Callbacks(Protocol):
    @property
    def policy(self) -> AddressPolicy: ...


class SlackHost(Protocol):
    """What handling a press needs of the application (``AppContext`` is one): its
    settings and secrets, transactions, and the callbacks' address policy, through which
    Slack's API is reached."""

    @property
    def settings(self) -> Settings: ...

    @property
    def box(self) -> SecretBox: ...

    @property
    def webhooks(self) -> _Callbacks: ...

    def reading(self) -> AbstractAsyncContextManager[UnitOfWork]: ...

    def transaction(self) -> AbstractAsyncContextManager[UnitOfWork]: ...


MAX_AGE_SECONDS = 300


def slack_signature(signing_secret: str, timestamp: str, body: bytes) -> str:
    base = b"v0:" + timestamp.encode() + b":" + body
    return "v0=" + hmac.new(signing_secret.encode(), base, hashlib.sha256).hexdigest()


def fresh(timestamp: str | None, now: float) -> bool:
    try:
        return timestamp is not None and abs(now - int(timestamp)) <= MAX_AGE_SECONDS
    except ValueError:
        return False


@dataclass(frozen=True)
class Press:
    """One button press: who pressed what, on which request."""

    slack_user_id: str
    decision: str
    request_id: uuid.UUID
    response_url: str


def parse_press(body: bytes) -> Press | None:
    try:
        payload = orjson.loads(parse_qs(body.decode())["payload"][0])
        action = payload["actions"][0]
        request_id = parse_id(str(action.get("value", "")))
        if request_id is None:
            return None
        return Press(
            str(payload["user"]["id"]), action["action_id"], request_id, payload["response_url"]
        )
    except (KeyError, IndexError, TypeError, ValueError, orjson.JSONDecodeError):
        return None


@dataclass(frozen=True)
class SlackApp:
    org_id: uuid.UUID
    bot_token: str


async def verified_app(
    ctx: SlackHost, press: Press, timestamp: str, signature: str, body: bytes
) -> SlackApp | None:
    """The Slack app of the request's org whose signing secret signed this body."""
    async with ctx.reading() as uow:
        org_id = await uow.approvals.org_of_request(press.request_id)
        if org_id is None:
            return None
        for channel in await NotificationRepository(uow.session, uow.dialect).channels(org_id):
            if channel.type != "slack":
                continue
            settings = channel_settings(ctx.box, channel)
            secret = settings.get("signing_secret")
            if secret and hmac.compare_digest(slack_signature(secret, timestamp, body), signature):
                return SlackApp(org_id, settings["bot_token"])
    return None


async def handle_press(ctx: SlackHost, app: SlackApp, press: Press) -> None:
    """After the acknowledgement: decide, then tell Slack (update or ephemeral)."""
    if press.decision not in ("approve", "reject"):
        return  # the Open button: Slack reports URL buttons too; nothing to do
    try:
        if await _needs_sign_in(ctx, app, press):
            await _respond(ctx, press, _sign_in_reply(_request_url(ctx, press), press))
            return
        email = await _slack_email(ctx, app.bot_token, press.slack_user_id)
        member = await _member_by_email(ctx, app.org_id, email) if email else None
        if member is None:
            await _respond(ctx, press, _ephemeral("You are not a signoff user of this team."))
            return
        if member.org_emergency_stop or ctx.settings.emergency_stop:
            await _respond(ctx, press, _ephemeral("The emergency stop is on: nothing is decided."))
            return
        payload = RelayedDecision(decision=press.decision, via="slack")
        now = utcnow()
        try:
            async with ctx.transaction() as uow:
                decided = await approvals.decide(
                    uow, member, press.request_id, payload, now, on="my_step"
                )
        except RequestNotPending:
            await _respond(ctx, press, _ephemeral("This request was decided already."))
            return
        except PasskeyRequired:
            url = _request_url(ctx, press)
            text = f"This request is decided with your passkey, on <{url}|its page in signoff>."
            await _respond(ctx, press, _ephemeral(text))
            return
        except AppError as exc:
            refusal = f"You may not decide this: {messages.slack_escape(exc.message)}"
            await _respond(ctx, press, _ephemeral(refusal))
            return
        # Long polls and live pages were told, and the callback attempted, at the commit.
        final = decided.transition.is_final
        await _respond(ctx, press, await _decided_message(ctx, app, press, member, final))
    except Exception:
        logger.exception("slack interaction on request %s failed", press.request_id)


async def _decided_message(
    ctx: SlackHost, app: SlackApp, press: Press, member: OrgMember, final: bool
) -> dict[str, Any]:
    verb = "approved" if press.decision == "approve" else "rejected"
    name = messages.slack_escape(member.user_name)
    outcome = (
        f"*{name}* {verb} this request."
        if final
        else (f"*{name}* voted to {press.decision}; more approvals are needed.")
    )
    async with ctx.reading() as uow:
        found = await uow.approvals.find_in_org(app.org_id, press.request_id)
    assert found is not None
    links = messages.Links(_request_url(ctx, press), None, None)
    item = messages.Item(facts_of(found), "created", links)
    return {
        "replace_original": True,
        "text": outcome,
        "blocks": messages.slack_decided_blocks(item, outcome),
    }


def _ephemeral(text: str) -> dict[str, Any]:
    """``text`` is mrkdwn: any user-supplied part of it is escaped by the caller."""
    return {"response_type": "ephemeral", "replace_original": False, "text": text}


def _request_url(ctx: SlackHost, press: Press) -> str:
    return f"{ctx.settings.public_url}/requests/{press.request_id}"


def needs_sign_in(document: RoutingDocument | None, request: RequestFacts) -> bool:
    """Whether deciding the request needs a signed-in person: a critical request, unless
    the rule that routes it now turns ``require_sign_in_for_critical`` off. With no rule
    routing it (the routing changed since), the setting's default holds."""
    if request.priority != "critical":
        return False
    rule = first_matching_rule(document, request) if document else None
    return rule is None or rule.require_sign_in_for_critical


async def _needs_sign_in(ctx: SlackHost, app: SlackApp, press: Press) -> bool:
    async with ctx.reading() as uow:
        found = await uow.approvals.find_in_org(app.org_id, press.request_id)
        document = await load_document(NotificationRepository(uow.session, uow.dialect), app.org_id)
    return found is not None and needs_sign_in(document, facts_of(found))


def _sign_in_reply(url: str, press: Press) -> dict[str, Any]:
    """The answer to a press that may not decide in place: the request page, to sign in."""
    text = f"A critical request is decided signed in: <{url}|open it in signoff>."
    reply = _ephemeral(text)
    reply["blocks"] = [
        {"type": "section", "text": {"type": "mrkdwn", "text": text}},
        {
            "type": "actions",
            "elements": [
                {
                    "type": "button",
                    "text": {"type": "plain_text", "text": "Sign in to decide"},
                    "style": "primary",
                    "action_id": "open",
                    # Slack reports this press too: the request's id lets it be verified.
                    "value": str(press.request_id),
                    "url": url,
                }
            ],
        },
    ]
    return reply


def _client(ctx: SlackHost) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=build_transport(ctx.webhooks.policy),
        timeout=ctx.settings.notification_timeout_seconds,
        follow_redirects=False,
    )


async def _slack_email(ctx: SlackHost, bot_token: str, user_id: str) -> str | None:
    async with _client(ctx) as client:
        answer = await client.post(
            f"{ctx.settings.slack_api_url}/users.info",
            data={"user": user_id},
            headers={"Authorization": f"Bearer {bot_token}"},
        )
    data = answer.json() if answer.status_code == 200 else {}
    if not data.get("ok"):
        return None
    email = data.get("user", {}).get("profile", {}).get("email")
    return str(email) if email else None


async def _member_by_email(ctx: SlackHost, org_id: uuid.UUID, email: str) -> OrgMember | None:
    async with ctx.reading() as uow:
        # The org is known: its unique (org_id, email) index finds the person.
        user = await uow.orgs.find_user_by_email(org_id, email)
        org = await uow.orgs.get_org(org_id)
    if user is None or user.deactivated_at is not None or org is None:
        return None
    return OrgMember.of(user, org)


async def _respond(ctx: SlackHost, press: Press, message: dict[str, Any]) -> None:
    async with _client(ctx) as client:
        await client.post(press.response_url, json=message)
