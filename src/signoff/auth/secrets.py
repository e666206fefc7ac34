"""Credentials we issue: API keys, webhook secrets, and password hashing."""

from __future__ import annotations

import base64
import hashlib
import re
import secrets

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

API_KEY_PREFIX = "gk_"
API_KEY_PATTERN = re.compile(r"gk_[0-9a-f]{64}")
WEBHOOK_SECRET_PREFIX = "whsec_"

_password_hasher = PasswordHasher()


def generate_api_key() -> str:
    return API_KEY_PREFIX + secrets.token_hex(32)


def hash_api_key(api_key: str) -> str:
    return hashlib.sha256(api_key.encode()).hexdigest()


def api_key_display_prefix(api_key: str) -> str:
    """Enough of the key to recognize it in a list, far too little to use it."""
    return api_key[:11]


def looks_like_api_key(token: str) -> bool:
    return API_KEY_PATTERN.fullmatch(token) is not None


def generate_webhook_secret() -> str:
    return WEBHOOK_SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode()


def hash_password(password: str) -> str:
    return _password_hasher.hash(password)


def verify_password(password_hash: str, password: str) -> bool:
    try:
        return _password_hasher.verify(password_hash, password)
    except (VerificationError, InvalidHashError):
        return False
