"""Sending one message on one channel: SMTP for e-mail, an HTTP POST for the rest.

HTTP goes through the callback machinery (``webhooks/delivery.py``): the same guarded
connection pools with the SSRF policy, no redirects, one deadline, a capped read. The
signed webhook channel signs with Standard Webhooks headers (``webhooks/signing.py``).
"""

from __future__ import annotations

import ssl
import time
from dataclasses import dataclass, field
from email.message import EmailMessage
from urllib.parse import parse_qs, unquote, urlsplit

import aiosmtplib
import orjson

from signoff.config import Settings
from signoff.webhooks.delivery import AttemptResult, ClientPool, send_attempt
from signoff.webhooks.service import target_of
from signoff.webhooks.signing import SigningKeys, signed_headers
from signoff.webhooks.urlpolicy import AddressPolicy

JSON_HEADERS = {"Content-Type": "application/json", "User-Agent": "signoff-notifications/1"}


@dataclass(frozen=True)
class SmtpServer:
    host: str
    port: int
    username: str | None
    password: str | None
    implicit_tls: bool
    starttls: bool
    # Certificates are verified, host name included, against the system's CAs, or only
    # against those of ``SIGNOFF_SMTP_CA_FILE`` (a private CA) when it is set.
    tls: ssl.SSLContext = field(default_factory=ssl.create_default_context, compare=False)

    @classmethod
    def from_url(cls, url: str, ca_file: str | None = None) -> SmtpServer:
        """``smtp://user:pass@host:port?starttls=true`` or ``smtps://...`` (implicit TLS)."""
        parts = urlsplit(url)
        if parts.scheme not in ("smtp", "smtps") or not parts.hostname:
            raise ValueError("SIGNOFF_SMTP_URL must look like smtp://host:port or smtps://...")
        implicit = parts.scheme == "smtps"
        query = parse_qs(parts.query)
        starttls = query.get("starttls", ["false"])[0].lower() in ("1", "true", "yes")
        return cls(
            host=parts.hostname,
            port=parts.port or (465 if implicit else 25),
            username=unquote(parts.username) if parts.username else None,
            password=unquote(parts.password) if parts.password else None,
            implicit_tls=implicit,
            starttls=starttls and not implicit,
            tls=ssl.create_default_context(cafile=ca_file),
        )


async def send_mail(server: SmtpServer, message: EmailMessage, timeout: float) -> AttemptResult:
    """One attempt. A certificate that does not verify fails it (and so it is retried):
    nothing is sent over a connection to an unproven server."""
    started = time.perf_counter()
    try:
        errors, reply = await aiosmtplib.send(
            message,
            hostname=server.host,
            port=server.port,
            username=server.username,
            password=server.password,
            use_tls=server.implicit_tls,
            start_tls=server.starttls,
            timeout=timeout,
            tls_context=server.tls,
        )
    except aiosmtplib.SMTPResponseException as exc:
        return AttemptResult(False, exc.code, _ms(started), None, f"smtp {exc.code}")
    except (TimeoutError, aiosmtplib.SMTPException, OSError) as exc:
        if _certificate_refused(exc):
            error = "smtp: the server's TLS certificate did not verify"
            return AttemptResult(False, 0, _ms(started), None, error)
        return AttemptResult(False, 0, _ms(started), None, f"smtp: {type(exc).__name__}")
    if errors:
        return AttemptResult(False, 0, _ms(started), None, "recipient refused")
    return AttemptResult(True, 250, _ms(started), reply[:200], None)


def _certificate_refused(exc: BaseException) -> bool:
    """aiosmtplib wraps the handshake's error (implicit TLS) or raises it (STARTTLS)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ssl.SSLCertVerificationError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _ms(started: float) -> int:
    return round((time.perf_counter() - started) * 1000)


@dataclass
class HttpChannels:
    clients: ClientPool
    policy: AddressPolicy
    settings: Settings

    async def post_json(self, url: str, payload: object) -> AttemptResult:
        return await self._post(url, orjson.dumps(payload), dict(JSON_HEADERS))

    async def post_signed(
        self, url: str, secret: str, message_id: str, attempt: int, payload: object
    ) -> AttemptResult:
        body = orjson.dumps(payload)
        headers = signed_headers(
            SigningKeys(secret),
            delivery_id=message_id,
            attempt=attempt,
            timestamp=int(time.time()),
            body=body,
        )
        return await self._post(url, body, headers)

    async def _post(self, url: str, body: bytes, headers: dict[str, str]) -> AttemptResult:
        return await send_attempt(
            self.clients,
            target_of(url),
            url,
            body,
            headers,
            policy=self.policy,
            timeout=self.settings.notification_timeout_seconds,
            read_cap=self.settings.delivery_response_read_bytes,
        )
