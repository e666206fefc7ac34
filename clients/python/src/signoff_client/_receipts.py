"""Approval receipts, checked offline: ``verify_receipt`` and the arguments hash rule.

A receipt is a compact JWS that signoff signs with Ed25519 when a request is approved.
It names the request, the action type and the hash of the exact arguments approved;
an executor checks it against the server's public keys (``/.well-known/jwks.json``)
before acting, then redeems it once (``redeem_receipt`` on the clients).
"""

from __future__ import annotations

import base64
import hashlib
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import rfc8785
from joserfc import jws
from joserfc.errors import JoseError
from joserfc.jwk import Key, KeySet

from signoff_client._errors import (
    ArgumentsMismatch,
    InvalidReceipt,
    ReceiptExpired,
    UnknownReceiptKey,
)

RECEIPT_TYPE = "signoff-receipt+jwt"
# RFC 9864's fully specified name, and the polymorphic one it replaces (same signature
# over an Ed25519 key). Nothing else: no "none", no HMAC that a public key could feed.
RECEIPT_ALGORITHMS = frozenset({"Ed25519", "EdDSA"})
# Clock skew tolerated between the server that signed and the machine that checks.
DEFAULT_LEEWAY_SECONDS = 10.0
HASH_PREFIX = "sha-256:"
_REQUIRED_STRINGS = ("iss", "sub", "jti", "org", "arguments_hash")
_REQUIRED_TIMES = ("iat", "nbf", "exp")

JWKS = KeySet | Mapping[str, Any]


class _ReceiptRegistry(jws.JWSRegistry):
    """Ed25519 only; ``EdDSA`` is read as its RFC 9864 name rather than as a deprecated
    algorithm of its own (which joserfc would warn about on every check)."""

    def get_alg(self, name: str) -> Any:
        return super().get_alg("Ed25519" if name == "EdDSA" else name)


# Unknown header parameters are ignored (RFC 7515), unless listed in "crit".
_REGISTRY = _ReceiptRegistry(algorithms=["Ed25519"], strict_check_header=False)


def arguments_hash(arguments: Mapping[str, Any] | None) -> str:
    """``"sha-256:"`` + base64url (no padding) of the SHA-256 of the arguments in RFC 8785
    canonical JSON; no arguments hash as ``{}``. Raises ``ValueError`` or ``TypeError``
    for what JSON cannot carry exactly (NaN, integers past 2**53, objects)."""
    canonical = rfc8785.dumps(dict(arguments) if arguments is not None else {})
    digest = hashlib.sha256(canonical).digest()
    return HASH_PREFIX + base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


@dataclass(frozen=True)
class Receipt:
    """A receipt whose signature, type, algorithm and validity period have been checked.

    The fields are its claims (``sub`` is the request id, times are seconds since the
    epoch); ``token`` is the JWS itself, to redeem; ``claims`` keeps every claim read.
    """

    token: str = field(repr=False)
    kid: str
    alg: str
    iss: str
    sub: str
    jti: str
    iat: float
    nbf: float
    exp: float
    org: str
    action_type: str | None
    arguments_hash: str
    preview_hash: str | None
    decided_by: tuple[str, ...]
    max_uses: int
    authorization_details: tuple[dict[str, Any], ...]
    claims: dict[str, Any] = field(repr=False, compare=False)

    @property
    def request_id(self) -> str:
        return self.sub

    @property
    def expires_at(self) -> datetime:
        return datetime.fromtimestamp(self.exp, UTC)


def key_set(jwks: JWKS) -> KeySet:
    """A joserfc ``KeySet`` from a JWKS document (``{"keys": [...]}``) or a ``KeySet``."""
    if isinstance(jwks, KeySet):
        return jwks
    try:
        return KeySet.import_key_set(dict(jwks))  # type: ignore[arg-type]
    except (JoseError, KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"not a JSON Web Key Set: {exc}") from exc


def verify_receipt(
    token: str,
    *,
    jwks: JWKS,
    arguments: Mapping[str, Any] | None = None,
    action_type: str | None = None,
    now: float | datetime | None = None,
    leeway: float = DEFAULT_LEEWAY_SECONDS,
) -> Receipt:
    """Check a receipt offline and return its claims; every failure is an ``InvalidReceipt``.

    In order: the compact JWS parses; its ``typ`` is ``signoff-receipt+jwt``; its ``alg``
    is ``Ed25519`` (or ``EdDSA``); its ``kid`` is one of ``jwks``; the signature holds;
    ``nbf <= now < exp`` (give or take ``leeway`` seconds; ``ReceiptExpired`` after);
    ``action_type``, when given, is the receipt's; ``arguments``, when given, hash to the
    receipt's ``arguments_hash`` (``ArgumentsMismatch`` otherwise).

    ``jwks`` is the server's key set: the JSON of ``/.well-known/jwks.json``, a joserfc
    ``KeySet``, or ``client.jwks()``. Checking is not redeeming: redeem the receipt before
    acting, so that it is used once.
    """
    signed = _parse(token)
    header = signed.headers()
    if header.get("typ") != RECEIPT_TYPE:
        raise InvalidReceipt(f"the token's typ is {header.get('typ')!r}, not {RECEIPT_TYPE!r}")
    alg = header.get("alg")
    if alg not in RECEIPT_ALGORITHMS:
        raise InvalidReceipt(f"the algorithm {alg!r} is not accepted (only Ed25519)")
    kid = header.get("kid")
    key = _key_for(key_set(jwks), kid)
    try:
        valid = jws.validate_compact(signed, key, registry=_REGISTRY)
    except JoseError as exc:
        raise InvalidReceipt(f"the signature cannot be checked: {exc}") from exc
    if not valid:
        raise InvalidReceipt("the signature does not match")
    receipt = _receipt(token, str(kid), str(alg), signed.payload)
    _check_period(receipt, _seconds(now), leeway)
    if action_type is not None and receipt.action_type != action_type:
        raise InvalidReceipt(
            f"the receipt is for the action type {receipt.action_type!r}, not {action_type!r}"
        )
    if arguments is not None:
        expected = arguments_hash(arguments)
        if expected != receipt.arguments_hash:
            raise ArgumentsMismatch(
                f"the arguments hash to {expected}, the receipt approved {receipt.arguments_hash}"
            )
    return receipt


def _parse(token: str) -> jws.CompactSignature:
    if not isinstance(token, str) or token.count(".") != 2:
        raise InvalidReceipt("not a compact JWS (three dot-separated parts)")
    try:
        return jws.extract_compact(token.encode("ascii"), registry=_REGISTRY)
    except (JoseError, UnicodeError, ValueError) as exc:
        raise InvalidReceipt(f"not a compact JWS: {exc}") from exc


def _key_for(keys: KeySet, kid: Any) -> Key:
    if not isinstance(kid, str) or not kid:
        raise InvalidReceipt("the receipt names no key (kid)")
    for key in keys:
        if key.kid == kid:
            return key
    raise UnknownReceiptKey(f"no key {kid!r} in the key set")


def _receipt(token: str, kid: str, alg: str, payload: bytes) -> Receipt:
    try:
        claims = json.loads(payload)
    except ValueError as exc:
        raise InvalidReceipt("the receipt's claims are not JSON") from exc
    if not isinstance(claims, dict):
        raise InvalidReceipt("the receipt's claims are not a JSON object")
    for name in _REQUIRED_STRINGS:
        if not isinstance(claims.get(name), str):
            raise InvalidReceipt(f"the receipt has no {name} claim")
    for name in _REQUIRED_TIMES:
        value = claims.get(name)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise InvalidReceipt(f"the receipt has no {name} time")
    max_uses = claims.get("max_uses", 1)
    if isinstance(max_uses, bool) or not isinstance(max_uses, int):
        raise InvalidReceipt("the receipt's max_uses is not an integer")
    decided_by = claims.get("decided_by") or []
    details = claims.get("authorization_details") or []
    if not isinstance(decided_by, list) or not isinstance(details, list):
        raise InvalidReceipt("the receipt's decided_by or authorization_details is not a list")
    action_type = claims.get("action_type")
    preview_hash = claims.get("preview_hash")
    return Receipt(
        token=token,
        kid=kid,
        alg=alg,
        iss=claims["iss"],
        sub=claims["sub"],
        jti=claims["jti"],
        iat=claims["iat"],
        nbf=claims["nbf"],
        exp=claims["exp"],
        org=claims["org"],
        action_type=action_type if isinstance(action_type, str) else None,
        arguments_hash=claims["arguments_hash"],
        preview_hash=preview_hash if isinstance(preview_hash, str) else None,
        decided_by=tuple(str(user) for user in decided_by),
        max_uses=max_uses,
        authorization_details=tuple(item for item in details if isinstance(item, dict)),
        claims=claims,
    )


def _check_period(receipt: Receipt, now: float, leeway: float) -> None:
    if now + leeway < receipt.nbf:
        raise InvalidReceipt(f"the receipt is not valid before {receipt.nbf:.0f}")
    if now - leeway >= receipt.exp:
        raise ReceiptExpired(f"the receipt expired at {receipt.expires_at.isoformat()}")


def _seconds(now: float | datetime | None) -> float:
    if now is None:
        return time.time()
    if isinstance(now, datetime):
        return now.timestamp()
    return float(now)
