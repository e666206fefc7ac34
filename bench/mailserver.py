"""A real SMTP server on loopback (aiosmtpd's protocol) that keeps every mail it accepts.

It lives in bench/ so that ``make bench-notifications`` needs nothing from tests/; the
notification tests use it too.
"""

from __future__ import annotations

import asyncio
import email
import email.policy
import re
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from email.message import EmailMessage

from aiosmtpd.smtp import SMTP, Envelope, Session


@dataclass(frozen=True)
class Mail:
    sender: str
    recipients: list[str]
    message: EmailMessage
    # Whether it came over TLS (STARTTLS or implicit).
    tls: bool = False

    @property
    def text(self) -> str:
        part = self.message.get_body(("plain",))
        assert part is not None
        return str(part.get_content()).replace("\r\n", "\n")  # type: ignore[attr-defined]

    @property
    def html(self) -> str:
        part = self.message.get_body(("html",))
        assert part is not None
        return str(part.get_content()).replace("\r\n", "\n")  # type: ignore[attr-defined]

    def link(self, label: str) -> str:
        found = re.search(rf"^{label}: (\S+)$", self.text, re.MULTILINE)
        assert found, self.text
        return found.group(1)


class MailBox:
    """aiosmtpd's handler: every accepted message, parsed."""

    def __init__(self) -> None:
        self.mails: list[Mail] = []
        self._arrived = asyncio.Condition()

    async def wait_for(self, count: int, timeout: float = 10.0) -> list[Mail]:
        """Wait until ``count`` mails have arrived (a readiness signal, not a sleep)."""
        async with self._arrived:
            await asyncio.wait_for(
                self._arrived.wait_for(lambda: len(self.mails) >= count), timeout
            )
        return list(self.mails)

    async def handle_DATA(  # noqa: N802 - the name aiosmtpd calls
        self, server: SMTP, session: Session, envelope: Envelope
    ) -> str:
        assert isinstance(envelope.content, bytes)
        parsed = email.message_from_bytes(envelope.content, policy=email.policy.default)
        assert isinstance(parsed, EmailMessage)
        assert server.transport is not None
        tls = server.transport.get_extra_info("ssl_object") is not None
        self.mails.append(
            Mail(str(envelope.mail_from), [str(r) for r in envelope.rcpt_tos], parsed, tls)
        )
        async with self._arrived:
            self._arrived.notify_all()
        return "250 OK"


@asynccontextmanager
async def smtp_server(
    box: MailBox | None = None,
    *,
    starttls: ssl.SSLContext | None = None,
    implicit_tls: ssl.SSLContext | None = None,
) -> AsyncIterator[tuple[MailBox, str]]:
    """A real SMTP server (aiosmtpd's protocol) on a loopback port, in this event loop;
    yields its mailbox and its URL. With ``starttls`` (a server TLS context) it offers
    STARTTLS and refuses mail without it (``smtp://...?starttls=true``); with
    ``implicit_tls`` it speaks TLS from the first byte (``smtps://``)."""
    box = box or MailBox()
    loop = asyncio.get_running_loop()

    def protocol() -> SMTP:
        if starttls is None:
            return SMTP(box)
        return SMTP(box, tls_context=starttls, require_starttls=True)

    server = await loop.create_server(protocol, "127.0.0.1", 0, ssl=implicit_tls)
    try:
        port = server.sockets[0].getsockname()[1]
        if implicit_tls is not None:
            yield box, f"smtps://127.0.0.1:{port}"
        elif starttls is not None:
            yield box, f"smtp://127.0.0.1:{port}?starttls=true"
        else:
            yield box, f"smtp://127.0.0.1:{port}"
    finally:
        server.close()
