"""The Ed25519 keys receipts are signed with, as one process holds them.

The current key is read (and decrypted) once, then kept: signing a receipt reads nothing.
Receipts are signed on read (docs/decisions/0033-receipt-signed-on-read.md) with the key
their ``kid`` names: a retired key is read and decrypted the first time one of its
receipts is read, then kept too. Keys are never deleted, so a receipt reads the same
bytes after ``signoff keys rotate`` as before.
A process looks again every ``signing_key_refresh_seconds`` for a key made by
``signoff keys rotate`` elsewhere, from ``AppContext.transaction`` before its transaction
opens. The first process to find no key makes one; two at once make one between them
(the unique ``signing_keys.current``).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from joserfc import jws
from joserfc.jwk import OKPKey
from joserfc.jws import JWSRegistry

from signoff.common.ids import new_id
from signoff.common.time import utcnow
from signoff.crypto import SecretBox
from signoff.errors import ServiceUnavailable
from signoff.receipts import repository
from signoff.storage import Database

logger = logging.getLogger(__name__)

ALGORITHM = "Ed25519"
# What a verifier accepts: RFC 9864's fully specified name and the polymorphic one.
ACCEPTED_ALGORITHMS = ["Ed25519", "EdDSA"]
TOKEN_TYPE = "signoff-receipt+jwt"  # noqa: S105 - a JOSE typ, not a password


def public_jwk(key: OKPKey, kid: str) -> dict[str, Any]:
    """The JWKS entry of ``key``."""
    public = key.as_dict(private=False)
    return {
        "kty": public["kty"],
        "crv": public["crv"],
        "x": public["x"],
        "kid": kid,
        "use": "sig",
        "alg": ALGORITHM,
    }


def new_key_row(box: SecretBox, now: datetime) -> dict[str, Any]:
    """A new current key's row: its private half encrypted with ``box``."""
    key = OKPKey.generate_key("Ed25519")
    kid = str(new_id())
    return {
        "kid": kid,
        "public_jwk": public_jwk(key, kid),
        "private_key_encrypted": box.encrypt(key.as_pem(private=True).decode()),
        "created_at": now,
        "current": True,
        "retired_at": None,
    }


# Built once: ``serialize_compact`` would otherwise build a registry for every receipt.
_SIGNING_REGISTRY = JWSRegistry(algorithms=[ALGORITHM])


@dataclass(frozen=True)
class SigningKey:
    """The current key, parsed once, with the header every receipt it signs carries."""

    kid: str
    key: OKPKey
    header: dict[str, str] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "header", {"alg": ALGORITHM, "typ": TOKEN_TYPE, "kid": self.kid})

    def sign(self, payload: bytes, typ: str = TOKEN_TYPE) -> str:
        """A compact JWS of ``payload``; ``typ`` tells a receipt from an audit checkpoint."""
        # A copy: joserfc may add to the header it is given.
        header = dict(self.header) if typ == TOKEN_TYPE else {**self.header, "typ": typ}
        return jws.serialize_compact(header, payload, self.key, registry=_SIGNING_REGISTRY)


class KeyRing:
    def __init__(self, db: Database, box: SecretBox, refresh_seconds: float) -> None:
        self.db = db
        self.box = box
        self.refresh_seconds = refresh_seconds
        self._current: SigningKey | None = None
        self._checked_at: float | None = None  # when the current key was looked for
        # Public keys by kid, for verifying redeemed receipts (retired ones included).
        self._public: dict[str, OKPKey] = {}
        # Keys other than the current one, by kid, for signing their receipts on read.
        self._by_kid: dict[str, SigningKey] = {}

    @property
    def current(self) -> SigningKey:
        if self._current is None:
            raise ServiceUnavailable(
                "Receipts cannot be signed: the signing key does not decrypt with this "
                "server's SIGNOFF_SECRET_KEY."
            )
        return self._current

    def forget(self) -> None:
        """Read and load the current key again at the next ``ready``."""
        self._current = None
        self._checked_at = None

    async def ready(self) -> None:
        """Make sure the current key was looked for recently, and loaded if it can be."""
        checked = self._checked_at
        if checked is not None and time.monotonic() - checked < self.refresh_seconds:
            return
        async with self.db.read_session() as session:
            row = await repository.current_key(session)
        if row is None:
            async with self.db.write_transaction() as session:
                await repository.add_key_unless_one_signs(
                    session, self.db.dialect, new_key_row(self.box, utcnow())
                )
            async with self.db.read_session() as session:
                row = await repository.current_key(session)
            assert row is not None  # ours, or the one another process made first
        self._checked_at = time.monotonic()
        if self._current is None or self._current.kid != row.kid:
            self._current = self._load(row)

    def _load(self, row: repository.KeyRow) -> SigningKey | None:
        """The key of ``row``; None, logged, when it does not decrypt with this process's
        SIGNOFF_SECRET_KEY: then only approvals fail (``current``), every other write
        goes on, and the key is looked for again after the refresh interval."""
        try:
            return SigningKey(
                row.kid, OKPKey.import_key(self.box.decrypt(row.private_key_encrypted))
            )
        except ValueError:
            logger.error("signing key %s does not decrypt with SIGNOFF_SECRET_KEY", row.kid)
            return None

    async def signing_key(self, kid: str) -> SigningKey:
        """The key ``kid`` names, to sign one of its receipts again (on read)."""
        current = self._current
        if current is not None and current.kid == kid:
            return current
        key = self._by_kid.get(kid)
        if key is None:
            async with self.db.read_session() as session:
                row = await repository.key_by_kid(session, kid)
            key = self._load(row) if row is not None else None
            if key is None:
                raise ServiceUnavailable(
                    "The receipt cannot be signed: its signing key is missing or does not "
                    "decrypt with this server's SIGNOFF_SECRET_KEY."
                )
            self._by_kid[kid] = key
        return key

    async def public_key(self, kid: str) -> OKPKey | None:
        """The public key ``kid`` names, whether it signs now or did before."""
        key = self._public.get(kid)
        if key is None:
            async with self.db.read_session() as session:
                row = await repository.key_by_kid(session, kid)
            if row is None:
                return None
            key = OKPKey.import_key(row.public_jwk)
            self._public[kid] = key
        return key


async def rotate(db: Database, box: SecretBox, now: datetime) -> str:
    """Retire the current key and make a new one current, in one transaction; its kid."""
    row = new_key_row(box, now)
    async with db.write_transaction() as session:
        await repository.retire_current(session, now)
        await repository.add_key(session, row)
    return str(row["kid"])
