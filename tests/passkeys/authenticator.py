"""A software authenticator for service tests: a P-256 key pair that answers WebAuthn
assertions the way a platform authenticator does, so that every check the server makes
(challenge, origin, relying party, signature, count) can be tried without a browser."""

from __future__ import annotations

import hashlib
import json
import secrets
import struct
import uuid
from dataclasses import dataclass, field
from datetime import datetime

import cbor2
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec

from signoff.models import Passkey
from signoff.passkeys.service import b64url, unb64url

# Flags of authenticator data: user present, user verified.
UP_UV = 0x05


@dataclass
class SoftAuthenticator:
    rp_id: str
    origin: str
    key: ec.EllipticCurvePrivateKey = field(
        default_factory=lambda: ec.generate_private_key(ec.SECP256R1())
    )
    credential_id: bytes = field(default_factory=lambda: secrets.token_bytes(16))
    count: int = 0

    def cose_public_key(self) -> bytes:
        numbers = self.key.public_key().public_numbers()
        return cbor2.dumps(
            {
                1: 2,
                3: -7,
                -1: 1,
                -2: numbers.x.to_bytes(32, "big"),
                -3: numbers.y.to_bytes(32, "big"),
            }
        )

    def passkey_row(self, org_id: uuid.UUID, user_id: uuid.UUID, now: datetime) -> Passkey:
        return Passkey(
            id=uuid.uuid4(),
            org_id=org_id,
            user_id=user_id,
            name="Test key",
            credential_id=b64url(self.credential_id),
            public_key=b64url(self.cose_public_key()),
            sign_count=0,
            transports=["internal"],
            created_at=now,
        )

    def assert_(
        self,
        options_json: str,
        *,
        origin: str | None = None,
        rp_id: str | None = None,
        challenge: bytes | None = None,
    ) -> str:
        """The credential JSON a browser posts, answering ``options_json``."""
        options = json.loads(options_json)
        self.count += 1
        client_data = json.dumps(
            {
                "type": "webauthn.get",
                "challenge": b64url(challenge or unb64url(options["challenge"])),
                "origin": origin or self.origin,
                "crossOrigin": False,
            }
        ).encode()
        auth_data = (
            hashlib.sha256((rp_id or self.rp_id).encode()).digest()
            + bytes([UP_UV])
            + struct.pack(">I", self.count)
        )
        signature = self.key.sign(
            auth_data + hashlib.sha256(client_data).digest(), ec.ECDSA(hashes.SHA256())
        )
        return json.dumps(
            {
                "id": b64url(self.credential_id),
                "rawId": b64url(self.credential_id),
                "type": "public-key",
                "response": {
                    "authenticatorData": b64url(auth_data),
                    "clientDataJSON": b64url(client_data),
                    "signature": b64url(signature),
                },
                "clientExtensionResults": {},
            }
        )
