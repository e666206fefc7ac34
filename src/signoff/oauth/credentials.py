"""What the authorization server hands out, how it is recognized, and PKCE.

Everything issued here is a long random string, stored only as its SHA-256: a fast hash
suffices for 256 random bits, and a lookup by hash is one indexed query.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets

from authlib.oauth2.rfc7636 import create_s256_code_challenge

from signoff.auth.principal import ALL_SCOPES

CLIENT_ID_PREFIX = "oc_"
CLIENT_SECRET_PREFIX = "cs_"  # noqa: S105 (a prefix, not a secret)
ACCESS_TOKEN_PREFIX = "oat_"  # noqa: S105
REFRESH_TOKEN_PREFIX = "ort_"  # noqa: S105
# RFC 7636 section 4.1: 43 to 128 characters of the unreserved set.
CODE_VERIFIER_PATTERN = re.compile(r"[A-Za-z0-9\-._~]{43,128}")
# S256 challenges are exactly 43 base64url characters.
S256_CHALLENGE_PATTERN = re.compile(r"[A-Za-z0-9\-_]{43}")
_ACCESS_TOKEN_PATTERN = re.compile(r"oat_[A-Za-z0-9\-_]{43}")


def hash_token(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def same_hash(value: str, expected_hash: str) -> bool:
    return hmac.compare_digest(hash_token(value), expected_hash)


def generate_client_id() -> str:
    return CLIENT_ID_PREFIX + secrets.token_hex(12)


def generate_client_secret() -> str:
    return CLIENT_SECRET_PREFIX + secrets.token_urlsafe(32)


def display_prefix(secret: str) -> str:
    """Enough of a secret to recognize it in a list, far too little to use it."""
    return secret[:10]


def generate_code() -> str:
    return secrets.token_urlsafe(32)


def generate_access_token() -> str:
    return ACCESS_TOKEN_PREFIX + secrets.token_urlsafe(32)


def generate_refresh_token() -> str:
    return REFRESH_TOKEN_PREFIX + secrets.token_urlsafe(32)


def generate_session_token() -> str:
    return secrets.token_urlsafe(32)


def generate_csrf_token() -> str:
    return secrets.token_urlsafe(32)


def looks_like_access_token(token: str) -> bool:
    """Cheap shape check, so garbage never costs a database query."""
    return _ACCESS_TOKEN_PATTERN.fullmatch(token) is not None


def s256_challenge(code_verifier: str) -> str:
    challenge: str = create_s256_code_challenge(code_verifier)
    return challenge


def verify_code_verifier(code_verifier: str, code_challenge: str) -> bool:
    if CODE_VERIFIER_PATTERN.fullmatch(code_verifier) is None:
        return False
    return hmac.compare_digest(s256_challenge(code_verifier), code_challenge)


def parse_scope(value: str | None) -> tuple[str, ...] | None:
    """Space-separated scopes in canonical order; None if any is unknown.

    An absent or empty scope means every scope (shown one by one on the consent page),
    as an API key would have: RFC 6749 section 3.3 lets the server pick the default.
    """
    requested = set((value or "").split())
    if not requested:
        return ALL_SCOPES
    if not requested <= set(ALL_SCOPES):
        return None
    return tuple(scope for scope in ALL_SCOPES if scope in requested)


def format_scope(scopes: tuple[str, ...]) -> str:
    return " ".join(scopes)
