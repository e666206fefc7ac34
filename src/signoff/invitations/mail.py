"""The mail of an invitation or a password reset: a pure function from its facts to an
``EmailMessage``. It is sent by the notification channels' SMTP sender
(``notifications/sending/channels.send_mail``), the one SMTP client of signoff.

Header values come from people's input (names, the org's name): each is folded to one
line, since a line break in a header value makes the whole message unsendable.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from datetime import datetime
from email.headerregistry import Address
from email.message import EmailMessage
from email.utils import format_datetime, make_msgid, parseaddr
from typing import Literal
from urllib.parse import urlsplit

Purpose = Literal["invite", "reset"]
SUBJECT_CHARS = 200


def one_line(text: str) -> str:
    """The text as one header line: line breaks, separators and control characters
    (``\\n``, ``\\v``, ``\\x1c``, U+2028, ...) become spaces, runs of spaces one space."""
    return " ".join("".join(ch if ch.isprintable() else " " for ch in text).split())


def message_id_domain(mail_from: str, public_url: str) -> str:
    """The sender's domain (or the server's host) for Message-ID, so that no DNS look-up
    of this machine's name is made for it."""
    address = parseaddr(mail_from)[1]
    if "@" in address:
        return address.rsplit("@", 1)[1]
    return urlsplit(public_url).hostname or "localhost"


@dataclass(frozen=True)
class LinkMail:
    purpose: Purpose
    to_name: str
    to_email: str
    org_name: str
    by_name: str
    url: str
    expires_at: datetime


def _utc(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M UTC")


def _subject(mail: LinkMail) -> str:
    if mail.purpose == "invite":
        text = f"{mail.by_name} invited you to {mail.org_name} on signoff"
    else:
        text = f"Choose a new signoff password for {mail.org_name}"
    return one_line(text)[:SUBJECT_CHARS]


def _paragraphs(mail: LinkMail) -> tuple[str, str, str]:
    """The opening, the link's label, and the closing."""
    if mail.purpose == "invite":
        opening = (
            f"{mail.by_name} added you to {mail.org_name} on signoff, where people approve "
            "what automations and agents ask to do. Choose your password to sign in."
        )
        label = "Choose your password"
    else:
        opening = (
            f"{mail.by_name}, an admin of {mail.org_name}, reset your signoff password: "
            "the old one no longer works. Choose a new one to sign in again."
        )
        label = "Choose a new password"
    closing = (
        f"The link works once, until {_utc(mail.expires_at)}. You sign in with "
        f"{mail.to_email}. If you did not expect this mail, ignore it."
    )
    return opening, label, closing


def link_message(mail: LinkMail, *, sender: str, now: datetime, domain: str) -> EmailMessage:
    opening, label, closing = _paragraphs(mail)
    message = EmailMessage()
    message["Subject"] = _subject(mail)
    message["From"] = one_line(sender)
    message["To"] = Address(display_name=one_line(mail.to_name), addr_spec=mail.to_email)
    message["Date"] = format_datetime(now)
    message["Message-ID"] = make_msgid(domain=domain)
    # Mail clients and scanners must not answer it, or treat the link as an unsubscribe.
    message["X-Auto-Response-Suppress"] = "All"
    greeting = f"Hello {mail.to_name},"
    text = "\n".join([greeting, "", opening, "", f"{label}: {mail.url}", "", closing, ""])
    message.set_content(text)
    e = html.escape
    message.add_alternative(
        '<!doctype html><html><body style="font-family:sans-serif;line-height:1.5">'
        f"<p>{e(greeting)}</p><p>{e(opening)}</p>"
        f'<p><a href="{e(mail.url)}">{e(label)}</a></p>'
        f'<p style="color:#555">{e(closing)}</p></body></html>',
        subtype="html",
    )
    return message
