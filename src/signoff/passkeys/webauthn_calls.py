"""Every call signoff makes into ``webauthn``, in one module.

``webauthn`` (with pyOpenSSL and the ASN.1 modules it loads) weighs several megabytes,
and only passkey routes and the audit verifier need it: callers import this module when
a ceremony or a check runs, never at the top of theirs, so that a server that never sees
a passkey does not hold it (docs/decisions/0043-serve-memory.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from webauthn import (
    generate_authentication_options,
    generate_registration_options,
    options_to_json,
    verify_authentication_response,
    verify_registration_response,
)
from webauthn.helpers.exceptions import WebAuthnException
from webauthn.helpers.structs import (
    AuthenticatorSelectionCriteria,
    AuthenticatorTransport,
    PublicKeyCredentialDescriptor,
    ResidentKeyRequirement,
    UserVerificationRequirement,
)

# What a malformed credential raises inside the library besides its own exceptions.
REFUSED = (WebAuthnException, ValueError, KeyError, TypeError, AttributeError)

KNOWN_TRANSPORTS = frozenset(t.value for t in AuthenticatorTransport)


@dataclass(frozen=True)
class Credential:
    """A registered passkey as an options document names it."""

    credential_id: bytes
    transports: tuple[str, ...]


@dataclass(frozen=True)
class Registered:
    credential_id: bytes
    public_key: bytes
    sign_count: int


def _descriptors(credentials: Iterable[Credential]) -> list[PublicKeyCredentialDescriptor]:
    return [
        PublicKeyCredentialDescriptor(
            id=c.credential_id,
            transports=[AuthenticatorTransport(t) for t in c.transports if t in KNOWN_TRANSPORTS],
        )
        for c in credentials
    ]


def registration_options(
    *,
    rp_id: str,
    rp_name: str,
    user_id: bytes,
    user_name: str,
    user_display_name: str,
    challenge: bytes,
    exclude: Iterable[Credential],
) -> str:
    """Options (JSON) for a discoverable credential that verifies its user."""
    options = generate_registration_options(
        rp_id=rp_id,
        rp_name=rp_name,
        user_id=user_id,
        user_name=user_name,
        user_display_name=user_display_name,
        challenge=challenge,
        authenticator_selection=AuthenticatorSelectionCriteria(
            resident_key=ResidentKeyRequirement.REQUIRED,
            user_verification=UserVerificationRequirement.REQUIRED,
        ),
        exclude_credentials=_descriptors(exclude),
    )
    return options_to_json(options)


def authentication_options(
    *, rp_id: str, challenge: bytes, allow: Iterable[Credential] = ()
) -> str:
    """Options (JSON) for an assertion that verifies its user; with no ``allow``, the
    authenticator offers its discoverable credentials."""
    options = generate_authentication_options(
        rp_id=rp_id,
        challenge=challenge,
        allow_credentials=_descriptors(allow) or None,
        user_verification=UserVerificationRequirement.REQUIRED,
    )
    return options_to_json(options)


def verify_registration(
    credential: Mapping[str, Any], *, challenge: bytes, rp_id: str, origin: str
) -> Registered:
    """The checked registration; the library's exceptions (and ``REFUSED``) propagate."""
    verified = verify_registration_response(
        credential=dict(credential),
        expected_challenge=challenge,
        expected_rp_id=rp_id,
        expected_origin=origin,
        require_user_verification=True,
    )
    return Registered(verified.credential_id, verified.credential_public_key, verified.sign_count)


def verify_assertion(
    credential: Mapping[str, Any],
    *,
    challenge: bytes,
    rp_id: str,
    origin: str,
    public_key: bytes,
    sign_count: int,
) -> int:
    """The authenticator's new signature count, once the assertion is checked."""
    verified = verify_authentication_response(
        credential=dict(credential),
        expected_challenge=challenge,
        expected_rp_id=rp_id,
        expected_origin=origin,
        credential_public_key=public_key,
        credential_current_sign_count=sign_count,
        require_user_verification=True,
    )
    return int(verified.new_sign_count)
