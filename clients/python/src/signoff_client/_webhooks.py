"""Checking that a decision callback really comes from signoff.

signoff signs every callback twice (docs/callbacks.md):

- Standard Webhooks: ``webhook-id``, ``webhook-timestamp`` (Unix seconds) and
  ``webhook-signature`` (``v1,<base64>`` entries separated by spaces), the HMAC-SHA256 of
  ``{id}.{timestamp}.{body}`` keyed with the base64-decoded part of the secret after
  ``whsec_``. The timestamp is signed, so an old callback cannot be replayed.
- ``X-Service-Signature: sha256=<hex>``, the HMAC-SHA256 of the raw body keyed with the
  UTF-8 bytes of the whole secret, ``whsec_`` included. It carries no time, so it cannot
  tell a replay; it is checked when the Standard Webhooks headers are absent (a proxy
  that drops them, say).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
import time
from collections.abc import Mapping, Sequence
from typing import Any

from signoff_client._errors import InvalidSignature

SECRET_PREFIX = "whsec_"  # noqa: S105 - a prefix, not a secret
DEFAULT_TOLERANCE_SECONDS = 300
# Unix seconds as ASCII digits: ``int()`` alone would take "١٢٣", " 12 " or a number
# too large to subtract from a float.
_TIMESTAMP = re.compile(r"[0-9]{1,12}", re.ASCII)


def verify_webhook(
    body: bytes,
    headers: Mapping[str, str],
    secret: str | Sequence[str],
    *,
    tolerance: float = DEFAULT_TOLERANCE_SECONDS,
    now: float | None = None,
) -> dict[str, Any]:
    """The callback's payload, once its signature and timestamp check out.

    ``body`` must be the raw bytes received (not re-serialized JSON); ``headers`` any
    mapping (names in any case); ``secret`` the connection's ``whsec_...`` secret, or
    several (the old and new ones while a rotation runs). Raises ``InvalidSignature``.
    """
    secrets = [secret] if isinstance(secret, str) else list(secret)
    if not secrets:
        raise ValueError("at least one webhook secret is needed")
    lowered = {
        name.lower(): value
        for name, value in headers.items()
        if isinstance(name, str) and isinstance(value, str)
    }
    if "webhook-signature" in lowered:
        _check_standard(body, lowered, secrets, tolerance, time.time() if now is None else now)
    elif "x-service-signature" in lowered:
        _check_service_signature(body, lowered, secrets)
    else:
        raise InvalidSignature("the callback carries no signature headers")
    try:
        payload = json.loads(body)
    except (ValueError, RecursionError):
        # A signed body is ours, so it is JSON of a sane depth; anything else is not.
        raise InvalidSignature("the signed body is not JSON") from None
    if not isinstance(payload, dict):
        raise InvalidSignature("the signed body is not a JSON object")
    return payload


def _check_standard(
    body: bytes, headers: Mapping[str, str], secrets: list[str], tolerance: float, now: float
) -> None:
    message_id = headers.get("webhook-id")
    stamp = headers.get("webhook-timestamp")
    if not message_id or not stamp:
        raise InvalidSignature("webhook-id or webhook-timestamp is missing")
    if not _TIMESTAMP.fullmatch(stamp):
        raise InvalidSignature("webhook-timestamp is not a Unix time")
    timestamp = int(stamp)
    if abs(now - timestamp) > tolerance:
        raise InvalidSignature(
            f"webhook-timestamp is {now - timestamp:+.0f} s off (tolerance {tolerance:g} s)"
        )
    signed = f"{message_id}.{timestamp}.".encode("utf-8", "surrogatepass") + body
    offered = [
        _as_bytes(part.split(",", 1)[1])
        for part in headers["webhook-signature"].split()
        if part.startswith("v1,")
    ]
    for secret in secrets:
        expected = base64.b64encode(
            hmac.new(_standard_key(secret), signed, hashlib.sha256).digest()
        )
        if any(hmac.compare_digest(expected, candidate) for candidate in offered):
            return
    raise InvalidSignature("no webhook-signature matches the secret")


def _standard_key(secret: str) -> bytes:
    encoded = secret.removeprefix(SECRET_PREFIX)
    try:
        return base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise InvalidSignature("the secret is not a whsec_ base64 secret") from None


def _check_service_signature(body: bytes, headers: Mapping[str, str], secrets: list[str]) -> None:
    # While a rotation's grace period runs, the old secret's signature comes beside it.
    offered = [
        headers[name]
        for name in ("x-service-signature", "x-service-signature-previous")
        if name in headers
    ]
    for secret in secrets:
        digest = hmac.new(secret.encode("utf-8"), body, hashlib.sha256).hexdigest()
        expected = b"sha256=" + digest.encode()
        if any(hmac.compare_digest(expected, _as_bytes(value.strip())) for value in offered):
            return
    raise InvalidSignature("X-Service-Signature does not match the secret")


def _as_bytes(header_value: str) -> bytes:
    """A header's text as bytes for ``hmac.compare_digest``, which refuses non-ASCII
    ``str``; a value no genuine signature could have then simply fails to match."""
    return header_value.encode("utf-8", "surrogatepass")
