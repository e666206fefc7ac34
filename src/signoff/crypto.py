"""Secrets we must read back (webhook secrets, callback headers): AES-256-GCM at rest.

API keys, OAuth tokens and passwords are *hashed* instead; only what the service itself
must present to a third party is encrypted. The key comes from ``SIGNOFF_SECRET_KEY``
(required in production); in development a key file is created on first use so the
embedded mode needs no setup.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import secrets
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.hashes import SHA256
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from signoff.config import Settings

_PREFIX = "v1:"
_NONCE_BYTES = 12


class SecretKeyMissing(RuntimeError):
    pass


def generate_secret_key() -> str:
    return base64.urlsafe_b64encode(os.urandom(32)).decode()


def _decode_key(text: str) -> bytes:
    try:
        raw = base64.urlsafe_b64decode(text.strip().encode())
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) == 32:
        return raw
    # Any other passphrase is stretched to 32 bytes; operators may paste what they like.
    return hashlib.sha256(text.encode()).digest()


def _load_or_create_key_file(path: Path) -> str:
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        pass
    key = generate_secret_key()
    try:
        # O_EXCL: if two processes start at once, exactly one writes and both read it.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path.read_text().strip()
    with os.fdopen(fd, "w") as handle:
        handle.write(key + "\n")
    return key


def master_key(settings: Settings) -> bytes:
    """The 32 bytes of ``SIGNOFF_SECRET_KEY`` (or the development key file)."""
    if settings.secret_key:
        return _decode_key(settings.secret_key)
    if settings.is_production:
        raise SecretKeyMissing(
            "SIGNOFF_SECRET_KEY must be set in production (generate one with: signoff secret-key)"
        )
    return _decode_key(_load_or_create_key_file(Path(settings.secret_key_file)))


def derived_key(settings: Settings, purpose: str) -> bytes:
    """A 32-byte key for one ``purpose``, derived from the secret key with HKDF.

    Each use gets its own key, so no other component ever holds the secret key itself
    and a key leaked from one use opens nothing else. Every replica sharing the secret
    key derives the same one."""
    info = b"signoff/" + purpose.encode()
    return HKDF(algorithm=SHA256(), length=32, salt=None, info=info).derive(master_key(settings))


class SecretBox:
    def __init__(self, key: bytes) -> None:
        self._aead = AESGCM(key)

    @classmethod
    def from_settings(cls, settings: Settings) -> SecretBox:
        return cls(master_key(settings))

    def encrypt(self, plaintext: str) -> str:
        nonce = secrets.token_bytes(_NONCE_BYTES)
        sealed = self._aead.encrypt(nonce, plaintext.encode(), None)
        return _PREFIX + base64.b64encode(nonce + sealed).decode()

    def decrypt(self, token: str) -> str:
        if not token.startswith(_PREFIX):
            raise ValueError("not a signoff secret box value")
        raw = base64.b64decode(token[len(_PREFIX) :])
        try:
            return self._aead.decrypt(raw[:_NONCE_BYTES], raw[_NONCE_BYTES:], None).decode()
        except InvalidTag as exc:
            raise ValueError("secret cannot be decrypted with this SIGNOFF_SECRET_KEY") from exc


def sha256_hex(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()
