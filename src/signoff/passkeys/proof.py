"""What a passkey signed for a decision, and the offline check of a kept assertion.

Free of the database and of the approvals service, so that ``signoff audit verify``
can run it on an export alone (docs/audit.md, "Passkey signatures").
"""

from __future__ import annotations

import base64
import hashlib
import uuid
from collections.abc import Mapping
from typing import Any

import rfc8785

from signoff.errors import ValidationFailed


class PasskeyRefused(ValidationFailed):
    """An assertion or registration that does not hold: wrong origin, relying party,
    challenge, signature or key; or a challenge used already or expired."""

    default_message = "The passkey's answer could not be verified. Please try again."


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unb64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def decision_challenge(
    request_id: uuid.UUID | str, decision: str, arguments_hash: str, nonce: str
) -> bytes:
    """What the authenticator signs for a decision: SHA-256 of the RFC 8785 form of the
    request, the decision, the arguments' hash and the server's nonce. Anyone holding
    those four can recompute it (docs/passkeys.md)."""
    document = {
        "type": "signoff.decision",
        "request_id": str(request_id),
        "decision": decision,
        "arguments_hash": arguments_hash,
        "nonce": nonce,
    }
    return hashlib.sha256(rfc8785.dumps(document)).digest()


def verify_stored_assertion(
    stored: Mapping[str, Any],
    public_key: str | None = None,
    *,
    rp_id: str | None = None,
    origin: str | None = None,
) -> None:
    """Check a kept assertion (``DecisionAssertion.as_export()``) again, offline: the
    challenge recomputed from its request, decision, arguments hash and nonce; the
    signature against ``public_key`` (the registered key, base64url COSE; by default the
    one kept with it); the relying party and origin (by default those kept with it).
    Raises ``PasskeyRefused`` if anything does not hold."""
    # Imported here: a server loads ``webauthn`` only when a passkey is checked
    # (docs/decisions/0043-serve-memory.md).
    from signoff.passkeys import webauthn_calls

    try:
        expected = decision_challenge(
            stored["request_id"], stored["decision"], stored["arguments_hash"], stored["nonce"]
        )
        credential = {
            "id": stored["credential_id"],
            "rawId": stored["credential_id"],
            "type": "public-key",
            "response": {
                "authenticatorData": stored["authenticator_data"],
                "clientDataJSON": stored["client_data_json"],
                "signature": stored["signature"],
            },
        }
        webauthn_calls.verify_assertion(
            credential,
            challenge=expected,
            rp_id=rp_id or stored["rp_id"],
            origin=origin or stored["origin"],
            public_key=unb64url(public_key or stored["public_key"]),
            # The count was checked when the vote was cast; here only the signature.
            sign_count=0,
        )
    except webauthn_calls.REFUSED as exc:
        raise PasskeyRefused(f"The stored passkey assertion does not verify: {exc}") from None
