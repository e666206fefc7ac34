"""What each channel is sent: pure functions from a request's facts and links to bytes.

Shapes follow each service's documented format: Slack Block Kit (header, section with
fields, actions with URL buttons), a Microsoft Teams incoming-webhook message carrying
one Adaptive Card, a Discord webhook embed, and a signed JSON event for webhook channels.
Texts are cut to each format's documented limits, and user-supplied text is made inert
for the format: a request's text may mention nobody and make no link. Slack's control
characters ``&<>`` are escaped in every text of every Slack payload; Teams and Discord
get their mention syntax and markdown links broken by a zero-width space (and Discord
mentions are switched off as well).
"""

from __future__ import annotations

import hashlib
import html
import ipaddress
import re
import unicodedata
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from email.message import EmailMessage
from email.utils import format_datetime
from typing import Any
from urllib.parse import urlsplit

from signoff.approvals.previews import KIND_LABELS, excerpt
from signoff.notifications.routing.document import RequestFacts

KIND_HEADLINES = {
    "created": "Approval requested",
    "step_opened": "Your approval is requested",
    "reminder": "Reminder: still waiting for a decision",
    "escalated": "Escalated: no decision yet",
    "expiry_warning": "Expires soon: no decision yet",
}
WEBHOOK_EVENTS = {
    "created": "approval.created",
    "step_opened": "approval.step_opened",
    "reminder": "approval.reminder",
    "escalated": "approval.escalated",
    "expiry_warning": "approval.reminder",
}
PRIORITY_COLOURS = {"low": 0x6B7280, "medium": 0x2563EB, "high": 0xEA580C, "critical": 0xDC2626}
# Metadata shown in a message: the first few keys, each value cut short.
SHOWN_METADATA_KEYS = 6
SHOWN_VALUE_CHARS = 200
DIGEST_ITEMS = 20


@dataclass(frozen=True)
class Links:
    """Where a message's buttons go: the request page, and the one-click pages."""

    open: str
    approve: str | None
    reject: str | None


@dataclass(frozen=True)
class Item:
    """One notification of a message: its request, what kind, and its links."""

    request: RequestFacts
    kind: str
    links: Links


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def key_metadata(request: RequestFacts) -> list[tuple[str, str]]:
    shown = []
    for key, value in list(request.metadata.items())[:SHOWN_METADATA_KEYS]:
        text = value if isinstance(value, str) else _json_text(value)
        shown.append((_cut(str(key), 80), _cut(text, SHOWN_VALUE_CHARS)))
    return shown


def _json_text(value: Any) -> str:
    import orjson

    return orjson.dumps(value).decode()


@dataclass(frozen=True)
class Excerpt:
    """The first lines of a request's preview, as plain text, and what kind it is."""

    label: str
    text: str


def preview_excerpt(request: RequestFacts) -> Excerpt | None:
    text = excerpt(request.preview)
    if text is None or request.preview is None:
        return None
    kind = str(request.preview.get("kind"))
    return Excerpt(f"Preview ({KIND_LABELS.get(kind, kind)})", text)


def facts(request: RequestFacts) -> list[tuple[str, str]]:
    rows = [("Request", f"#{request.number}")] if request.number is not None else []
    rows.append(("Priority", request.priority))
    if request.action_type:
        rows.append(("Action", request.action_type))
    if request.source:
        rows.append(("Source", request.source))
    if request.expires_at:
        rows.append(("Expires", _utc(request.expires_at)))
    return rows


def _utc(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M UTC")


# ---- e-mail ----


def header_text(value: str) -> str:
    """``value`` as one line, its runs of whitespace collapsed to one space: text placed in
    a mail header. Python's e-mail package refuses a header holding any line break it
    knows (``str.splitlines``: CR, LF, VT, FF, FS, GS, RS, NEL, U+2028, U+2029), and a
    request's title may hold any; other control characters have no place there either."""
    spaced = "".join(" " if unicodedata.category(c) == "Cc" else c for c in value)
    return " ".join(spaced.split())


@dataclass(frozen=True)
class MailIds:
    """A mail's identity: when it was sent, its ``Message-ID``, and the id of the first
    mail of its thread (``In-Reply-To`` and ``References``), None for that first mail."""

    date: datetime
    message_id: str
    thread: str | None


def mail_domain(public_url: str) -> str:
    """The right-hand side of the ids of our mails: the public URL's host (its IDNA
    form), an address as a domain literal; ``localhost`` if it names none."""
    try:
        host = urlsplit(public_url.strip()).hostname
    except ValueError:
        host = None
    if not host:
        return "localhost"
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        pass
    else:
        return f"[IPv6:{address}]" if address.version == 6 else f"[{address}]"
    try:
        return host.encode("idna").decode("ascii")
    except UnicodeError:
        return "localhost"


def mail_ids(
    kind: str,
    request_id: uuid.UUID | str,
    notification_id: uuid.UUID | str,
    recipient: str,
    domain: str,
) -> tuple[str, str | None]:
    """The ``Message-ID`` of a mail about a request, and the id its thread starts with.

    A person's first mail about a request (``created``) opens the thread; its id is
    derived from the request and the person, so every later mail (a reminder, an
    escalation, an expiry warning, a step opened), sent by any process after any restart,
    names it without anything stored. The mails to two people differ (each carries its
    own links), so their ids differ too. A later mail's own id is its notification row's:
    a retry of a send whose answer was lost keeps it, and clients show the mail once."""
    person = hashlib.sha256(recipient.strip().lower().encode()).hexdigest()[:16]
    # Hex ids, no prefix: short enough that most headers naming them fit on one line.
    root = f"<{uuid.UUID(str(request_id)).hex}.{person}@{domain}>"
    if kind == "created":
        return root, None
    return f"<{uuid.UUID(str(notification_id)).hex}@{domain}>", root


def email_message(item: Item, sender: str, recipient: str, ids: MailIds) -> EmailMessage:
    request, links = item.request, item.links
    headline = KIND_HEADLINES[item.kind]
    message = EmailMessage()
    message["Subject"] = _cut(header_text(f"[{request.priority}] {headline}: {request.title}"), 200)
    message["From"] = header_text(sender)
    message["To"] = header_text(recipient)
    message["Date"] = format_datetime(ids.date.astimezone(UTC), usegmt=True)
    message["Message-ID"] = ids.message_id
    if ids.thread:
        message["In-Reply-To"] = ids.thread
        message["References"] = ids.thread
    message.set_content(_email_text(item, headline))
    message.add_alternative(_email_html(item, headline), subtype="html")
    if links.approve:
        # Mail clients and scanners must not treat the links as an unsubscribe action.
        message["X-Auto-Response-Suppress"] = "All"
    return message


def _email_text(item: Item, headline: str) -> str:
    request, links = item.request, item.links
    lines = [headline, "", request.title, ""]
    lines += [f"{name}: {value}" for name, value in facts(request)]
    lines += ["", request.description, ""]
    metadata = key_metadata(request)
    if metadata:
        lines += ["Details:"] + [f"  {k}: {v}" for k, v in metadata] + [""]
    shown = preview_excerpt(request)
    if shown:
        lines += [f"{shown.label}:"] + [f"  {line}" for line in shown.text.split("\n")]
        lines += [f"  (The whole preview is on the request's page: {links.open})", ""]
    if links.approve and links.reject:
        lines += [f"Approve: {links.approve}", f"Reject: {links.reject}"]
        lines += ["(Each link asks you to confirm before anything is decided.)", ""]
    lines += [f"Open the request: {links.open}", ""]
    return "\n".join(lines)


def _email_html(item: Item, headline: str) -> str:
    request, links = item.request, item.links
    e = html.escape
    rows = "".join(
        f'<tr><th align="left" style="padding:2px 12px 2px 0">{e(n)}</th><td>{e(v)}</td></tr>'
        for n, v in facts(request) + key_metadata(request)
    )
    buttons = ""
    if links.approve and links.reject:
        buttons = (
            f'<a href="{e(links.approve)}" style="background:#15803d;color:#fff;'
            'padding:10px 18px;border-radius:6px;text-decoration:none;font-weight:600">Approve</a> '
            f'<a href="{e(links.reject)}" style="background:#fff;color:#b91c1c;'
            "border:1px solid #b91c1c;padding:9px 18px;border-radius:6px;"
            'text-decoration:none;font-weight:600">Reject</a> '
        )
    return (
        '<!doctype html><html><body style="font-family:system-ui,sans-serif;color:#111">'
        f'<p style="color:#555">{e(headline)}</p>'
        f'<h1 style="font-size:20px">{e(request.title)}</h1>'
        f"<table>{rows}</table>"
        f'<p style="white-space:pre-wrap">{e(request.description)}</p>'
        f"{_email_html_excerpt(request, links.open)}"
        f"<p>{buttons}"
        f'<a href="{e(links.open)}">Open the request</a></p>'
        '<p style="color:#777;font-size:12px">Approve and Reject ask you to confirm '
        "before anything is decided.</p></body></html>"
    )


def _email_html_excerpt(request: RequestFacts, page: str) -> str:
    shown = preview_excerpt(request)
    if shown is None:
        return ""
    e = html.escape
    return (
        f'<p style="margin:16px 0 4px;font-weight:600">{e(shown.label)}</p>'
        '<pre style="white-space:pre-wrap;background:#f1f3f6;border:1px solid #e3e6eb;'
        'border-radius:6px;padding:10px 12px;font-size:13px;margin:0">'
        f"{e(shown.text)}</pre>"
        f'<p style="color:#555;font-size:13px;margin:4px 0 16px"><a href="{e(page)}">'
        "See the whole preview</a></p>"
    )


# ---- Slack: Block Kit ----


def slack_escape(text: str) -> str:
    """Slack's control characters as Slack documents their escaping: text escaped so is
    shown as typed, and ``<!channel>``, ``<@U…>`` or ``<http://x|label>`` in it neither
    notify anyone nor make a link."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _slack_cut(escaped: str, limit: int) -> str:
    """``_cut`` of escaped text that never leaves half an entity (``&am…``)."""
    if len(escaped) <= limit:
        return escaped
    kept = escaped[: limit - 1]
    amp = kept.rfind("&")
    if amp != -1 and ";" not in kept[amp:]:
        kept = kept[:amp]
    return kept + "…"


SIGN_IN_TO_DECIDE = "A critical request: sign in to signoff to decide it."


def _slack_buttons(item: Item, interactive: bool, sign_in_first: bool) -> dict[str, Any]:
    rid = str(item.request.id)
    elements: list[dict[str, Any]] = []
    if sign_in_first:
        # Only the request page decides, after sign-in: no button names a decision, so
        # no press of this message asks to decide in place.
        elements.append(
            {
                "type": "button",
                "text": {"type": "plain_text", "text": "Sign in to decide"},
                "style": "primary",
                "action_id": "open",
                "value": rid,
                "url": item.links.open,
            }
        )
        return {"type": "actions", "block_id": f"signoff:{rid}", "elements": elements}
    for decision, label, style in (
        ("approve", "Approve", "primary"),
        ("reject", "Reject", "danger"),
    ):
        url = getattr(item.links, decision)
        if not (interactive or url):
            continue
        button: dict[str, Any] = {
            "type": "button",
            "text": {"type": "plain_text", "text": label},
            "style": style,
            "action_id": decision,
            "value": rid,
        }
        if not interactive:
            button["url"] = url
        elements.append(button)
    elements.append(
        {
            "type": "button",
            "text": {"type": "plain_text", "text": "Open"},
            "action_id": "open",
            "value": rid,
            "url": item.links.open,
        }
    )
    return {"type": "actions", "block_id": f"signoff:{rid}", "elements": elements}


def slack_blocks(
    item: Item, interactive: bool, sign_in_first: bool = False
) -> list[dict[str, Any]]:
    """``sign_in_first``: the request may only be decided signed in (a critical request
    under ``require_sign_in_for_critical``): its button opens the request page."""
    request = item.request
    fields = [
        {
            "type": "mrkdwn",
            "text": _slack_cut(f"*{slack_escape(n)}*\n{slack_escape(v)}", 2000),
        }
        for n, v in (facts(request) + key_metadata(request))[:10]
    ]
    blocks: list[dict[str, Any]] = [
        {
            "type": "header",
            "text": {"type": "plain_text", "text": _cut(KIND_HEADLINES[item.kind], 150)},
        },
        {
            "type": "section",
            "text": {
                "type": "mrkdwn",
                "text": _slack_cut(
                    f"*{slack_escape(request.title)}*\n{slack_escape(request.description)}",
                    3000,
                ),
            },
            "fields": fields,
        },
    ]
    shown = preview_excerpt(request)
    if shown:
        blocks.append(_slack_excerpt(shown, item.links.open))
    if sign_in_first:
        blocks.append(
            {"type": "context", "elements": [{"type": "mrkdwn", "text": SIGN_IN_TO_DECIDE}]}
        )
    blocks.append(_slack_buttons(item, interactive, sign_in_first))
    return blocks


def _no_fence(text: str) -> str:
    """Backticks each followed by a zero-width space: the text reads the same, and no
    run of them can close the code block it is shown in."""
    return text.replace("`", "`" + ZERO_WIDTH_SPACE)


def _slack_excerpt(shown: Excerpt, page: str) -> dict[str, Any]:
    """The excerpt in a code block: escaped as every text is, and no run of backticks of
    its own can end the block early."""
    code = _slack_cut(slack_escape(_no_fence(shown.text)), 2800)
    return {
        "type": "section",
        "text": {
            "type": "mrkdwn",
            "text": f"*{slack_escape(shown.label)}* · <{page}|see it whole>\n```{code}```",
        },
    }


def slack_payload(
    items: Sequence[Item], interactive: bool, sign_in_first: bool = False
) -> dict[str, Any]:
    """The top-level ``text`` is what notifications and previews show: escaped as the
    blocks are, or a title could notify the whole channel from there."""
    if len(items) == 1:
        item = items[0]
        headline = slack_escape(f"{KIND_HEADLINES[item.kind]}: {item.request.title}")
        return {
            "text": _slack_cut(headline, 3000),
            "blocks": slack_blocks(item, interactive, sign_in_first),
        }
    blocks: list[dict[str, Any]] = [
        {
            "type": "header",
            "text": {"type": "plain_text", "text": f"{len(items)} requests wait for a decision"},
        }
    ]
    for item in items[:DIGEST_ITEMS]:
        title = _slack_cut(slack_escape(item.request.title), 150)
        line = f"<{item.links.open}|{title}>"
        blocks.append(
            {
                "type": "section",
                "text": {"type": "mrkdwn", "text": f"{line} · {item.request.priority}"},
            }
        )
    if len(items) > DIGEST_ITEMS:
        more = f"…and {len(items) - DIGEST_ITEMS} more in the inbox."
        blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": more}]})
    return {"text": f"{len(items)} requests wait for a decision", "blocks": blocks}


def slack_decided_blocks(item: Item, outcome: str) -> list[dict[str, Any]]:
    """The message once decided in Slack: the buttons give way to who decided."""
    blocks = slack_blocks(item, interactive=False)[:2]
    blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": outcome}]})
    return blocks


# ---- Teams and Discord: markdown whose mentions and links are inert ----

ZERO_WIDTH_SPACE = "\u200b"
# ``](`` and ``][`` are where a markdown link (inline or by reference) begins its target.
_MARKDOWN_LINK = re.compile(r"\](?=[(\[])")
# Anything a tag could start with: Teams mentions are ``<at>name</at>``, and no HTML
# may pass for markup.
_TEAMS_TAG = re.compile(r"<(?=\S)")
# ``@everyone``, ``@here``, and ``<@user>``, ``<@!user>``, ``<@&role>``, ``<#channel>``.
_DISCORD_MENTION = re.compile(r"@(?=everyone|here)|<(?=[@#])", re.IGNORECASE)


def _split(pattern: re.Pattern[str], text: str) -> str:
    """A zero-width space after each match: the text reads the same, parses as text."""
    return pattern.sub(lambda m: m.group(0) + ZERO_WIDTH_SPACE, text)


def teams_text(text: str) -> str:
    return _split(_MARKDOWN_LINK, _split(_TEAMS_TAG, text))


def discord_text(text: str) -> str:
    return _split(_MARKDOWN_LINK, _split(_DISCORD_MENTION, text))


# ---- Microsoft Teams: an Adaptive Card in the incoming-webhook message ----


def _teams_actions(item: Item) -> list[dict[str, Any]]:
    actions = []
    if item.links.approve:
        actions.append({"type": "Action.OpenUrl", "title": "Approve", "url": item.links.approve})
    if item.links.reject:
        actions.append({"type": "Action.OpenUrl", "title": "Reject", "url": item.links.reject})
    actions.append({"type": "Action.OpenUrl", "title": "Open", "url": item.links.open})
    return actions


def teams_payload(items: Sequence[Item]) -> dict[str, Any]:
    if len(items) == 1:
        item = items[0]
        request = item.request
        body: list[dict[str, Any]] = [
            {
                "type": "TextBlock",
                "text": KIND_HEADLINES[item.kind],
                "isSubtle": True,
                "wrap": True,
            },
            {
                "type": "TextBlock",
                "text": teams_text(request.title),
                "size": "Medium",
                "weight": "Bolder",
                "wrap": True,
            },
            {"type": "TextBlock", "text": teams_text(request.description), "wrap": True},
            {
                "type": "FactSet",
                "facts": [
                    {"title": teams_text(n), "value": teams_text(v)}
                    for n, v in facts(request) + key_metadata(request)
                ],
            },
        ]
        shown = preview_excerpt(request)
        if shown:
            body += [
                {"type": "TextBlock", "text": shown.label, "weight": "Bolder", "wrap": True},
                {
                    "type": "TextBlock",
                    "text": teams_text(shown.text),
                    "fontType": "Monospace",
                    "wrap": True,
                },
            ]
        actions = _teams_actions(item)
    else:
        body = [
            {
                "type": "TextBlock",
                "text": f"{len(items)} requests wait for a decision",
                "weight": "Bolder",
                "wrap": True,
            }
        ]
        # The title is text beside its link, never the link's label: a label holding
        # a bracket of its own would end the link early.
        body += [
            {
                "type": "TextBlock",
                "text": f"{teams_text(_cut(i.request.title, 150))} · {i.request.priority}"
                f" · [Open]({i.links.open})",
                "wrap": True,
            }
            for i in items[:DIGEST_ITEMS]
        ]
        actions = []
    card = {
        "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
        "type": "AdaptiveCard",
        "version": "1.4",
        "body": body,
        "actions": actions,
    }
    return {
        "type": "message",
        "attachments": [
            {
                "contentType": "application/vnd.microsoft.card.adaptive",
                "contentUrl": None,
                "content": card,
            }
        ],
    }


# ---- Discord: an embed ----


def discord_payload(items: Sequence[Item]) -> dict[str, Any]:
    """Buttons (message components) need an application-owned webhook; the links are
    markdown links in the embed instead, which every incoming webhook may carry."""
    embeds = []
    for item in items[:10]:
        request, links = item.request, item.links
        actions = [f"[Open]({links.open})"]
        if links.approve and links.reject:
            actions[:0] = [f"[Approve]({links.approve})", f"[Reject]({links.reject})"]
        fields = [
            {
                "name": _cut(discord_text(n), 256),
                "value": _cut(discord_text(v), 1024),
                "inline": True,
            }
            for n, v in facts(request) + key_metadata(request)
        ][:23]
        shown = preview_excerpt(request)
        if shown:
            code = _cut(discord_text(_no_fence(shown.text)), 1000)
            fields.append({"name": shown.label, "value": f"```{code}```", "inline": False})
        fields.append({"name": "Decide", "value": " · ".join(actions), "inline": False})
        embeds.append(
            {
                "title": _cut(discord_text(request.title), 256),
                "description": _cut(discord_text(request.description), 4096),
                "url": links.open,
                "color": PRIORITY_COLOURS.get(request.priority, 0),
                "fields": fields,
                "footer": {"text": KIND_HEADLINES[item.kind]},
                "timestamp": request.created_at.isoformat(),
            }
        )
    content = KIND_HEADLINES[items[0].kind] if len(items) == 1 else f"{len(items)} requests wait"
    if len(items) > 10:
        content += f" (10 shown; {len(items) - 10} more in the inbox)"
    # No mention in a request's text may ping anyone: switched off, and made text.
    return {"content": content, "embeds": embeds, "allowed_mentions": {"parse": []}}


# ---- the signed webhook channel ----


def webhook_event(item: Item, now: datetime) -> dict[str, Any]:
    request = item.request
    return {
        "type": WEBHOOK_EVENTS[item.kind],
        "timestamp": now.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        "data": {
            "request_id": str(request.id),
            "kind": item.kind,
            "title": request.title,
            "description": request.description,
            "priority": request.priority,
            "action_type": request.action_type,
            "source": request.source,
            "metadata": request.metadata,
            "expires_at": request.expires_at.isoformat() if request.expires_at else None,
            "url": item.links.open,
        },
    }
