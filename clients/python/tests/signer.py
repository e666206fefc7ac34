"""Receipts as signoff signs them, made in the tests with real Ed25519 keys (joserfc)."""

from __future__ import annotations

import base64
import json
import time
import warnings
from typing import Any

from joserfc import jws
from joserfc.jwk import KeySet, OKPKey

from signoff_client import arguments_hash

NOW = 1_800_000_000  # the tests' clock: seconds since the epoch
RECEIPT_TYPE = "signoff-receipt+jwt"


def new_key(kid: str = "k1") -> OKPKey:
    return OKPKey.generate_key("Ed25519", parameters={"kid": kid})


def public_jwks(*keys: OKPKey) -> dict[str, Any]:
    """What ``/.well-known/jwks.json`` answers: public halves only."""
    return KeySet(list(keys)).as_dict(private=False)


def claims(**overrides: Any) -> dict[str, Any]:
    """A receipt's claims for request ``req-1``, valid for 15 minutes from ``NOW``."""
    arguments = overrides.pop("arguments", {"path": "/srv/old"})
    values: dict[str, Any] = {
        "iss": "https://signoff.example",
        "sub": "req-1",
        "jti": "jti-1",
        "iat": NOW,
        "nbf": NOW,
        "exp": NOW + 900,
        "org": "org-1",
        "action_type": "files.delete",
        "arguments_hash": arguments_hash(arguments),
        "decided_by": ["user-1"],
        "max_uses": 1,
    }
    values.update(overrides)
    values["authorization_details"] = [
        {
            "type": "signoff_action",
            "request_id": values["sub"],
            "action_type": values["action_type"],
            "arguments_hash": values["arguments_hash"],
            "org": values["org"],
        }
    ]
    return values


def current_claims(**overrides: Any) -> dict[str, Any]:
    """``claims()`` valid now by the real clock, for checks that read it (the clients)."""
    now = int(time.time())
    return claims(**{"iat": now, "nbf": now - 1, "exp": now + 900, **overrides})


def sign(key: Any, payload: dict[str, Any] | None = None, **header: Any) -> str:
    """A compact JWS of ``payload`` (default: ``claims()``), header ``alg: Ed25519``."""
    protected = {"alg": "Ed25519", "typ": RECEIPT_TYPE, "kid": key.kid, **header}
    protected = {name: value for name, value in protected.items() if value is not None}
    body = json.dumps(payload if payload is not None else claims()).encode()
    with warnings.catch_warnings():  # joserfc warns that "EdDSA" is the deprecated name
        warnings.simplefilter("ignore")
        return jws.serialize_compact(protected, body, key, algorithms=[protected["alg"]])


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def segment(value: dict[str, Any]) -> str:
    return b64(json.dumps(value).encode())
