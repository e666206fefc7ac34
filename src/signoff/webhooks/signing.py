"""Signing callbacks two ways (interface.md 6.2, decisions.md section 9).

- ``X-Service-Signature: sha256=<hex>``: HMAC-SHA256 of the raw body, keyed with the UTF-8
  bytes of the whole secret string, ``whsec_`` included.
- Standard Webhooks: ``webhook-id``, ``webhook-timestamp`` (Unix seconds) and
  ``webhook-signature: v1,<base64>``, the HMAC-SHA256 of ``{id}.{timestamp}.{body}`` keyed
  with the base64-decoded part of the secret after ``whsec_``. Several signatures are
  separated by spaces, which is how a rotated secret keeps signing beside the new one.

While a rotation's grace period runs, ``X-Service-Signature`` (one value only, by the
interface) is keyed with the new secret and ``X-Service-Signature-Previous`` carries the
old one's, so a receiver still configured with the old secret can check that header.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Sequence
from dataclasses import dataclass

SECRET_PREFIX = "whsec_"  # noqa: S105 - a prefix, not a secret

CONTENT_TYPE = "application/json"
USER_AGENT = "signoff-webhooks/1"
SIGNATURE_HEADER = "X-Service-Signature"
PREVIOUS_SIGNATURE_HEADER = "X-Service-Signature-Previous"
DELIVERY_ID_HEADER = "X-Service-Delivery-Id"
ATTEMPT_HEADER = "X-Service-Attempt"
REQUEST_ID_HEADER = "X-Request-Id"


@dataclass(frozen=True)
class SigningKeys:
    """The connection's current secret, and the previous one while its grace period runs."""

    current: str
    previous: str | None = None

    @property
    def all(self) -> Sequence[str]:
        return (self.current,) if self.previous is None else (self.current, self.previous)


def service_signature(secret: str, body: bytes) -> str:
    """``sha256=`` + lowercase hex HMAC-SHA256 of the body, keyed with the whole secret."""
    return "sha256=" + hmac.new(secret.encode("utf-8"), body, hashlib.sha256).hexdigest()


def _standard_key(secret: str) -> bytes:
    encoded = secret.removeprefix(SECRET_PREFIX)
    return base64.b64decode(encoded + "=" * (-len(encoded) % 4))


def standard_signature(secret: str, message_id: str, timestamp: int, body: bytes) -> str:
    """One ``v1,<base64>`` signature of the Standard Webhooks spec."""
    signed = f"{message_id}.{timestamp}.".encode() + body
    digest = hmac.new(_standard_key(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def signed_headers(
    keys: SigningKeys,
    *,
    delivery_id: str,
    attempt: int,
    timestamp: int,
    body: bytes,
    extra: dict[str, str] | None = None,
    request_id: str | None = None,
) -> dict[str, str]:
    """Every header of one attempt: the caller's extras first, ours last (ours win).

    Reserved names are refused when a request is created, so ``extra`` cannot collide;
    ``X-Request-Id``, which callers may have set before we sent one, is replaced by ours.
    """
    headers = dict(extra or {})
    if request_id is not None:
        for name in [n for n in headers if n.lower() == REQUEST_ID_HEADER.lower()]:
            del headers[name]
        headers[REQUEST_ID_HEADER] = request_id
    headers.update(
        {
            "Content-Type": CONTENT_TYPE,
            "User-Agent": USER_AGENT,
            SIGNATURE_HEADER: service_signature(keys.current, body),
            DELIVERY_ID_HEADER: delivery_id,
            ATTEMPT_HEADER: str(attempt),
            "webhook-id": delivery_id,
            "webhook-timestamp": str(timestamp),
            "webhook-signature": " ".join(
                standard_signature(secret, delivery_id, timestamp, body) for secret in keys.all
            ),
        }
    )
    if keys.previous is not None:
        headers[PREVIOUS_SIGNATURE_HEADER] = service_signature(keys.previous, body)
    return headers
