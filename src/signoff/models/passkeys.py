"""Passkeys (WebAuthn credentials), their one-time challenges, and the assertions that
signed decisions (docs/passkeys.md)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from signoff.common.ids import new_id
from signoff.common.time import utcnow
from signoff.models.base import Base, JSONType


class Passkey(Base):
    """A user's registered credential: its id and public key, never a secret."""

    __tablename__ = "passkeys"
    __table_args__ = (Index("ix_passkeys_user_created", "user_id", "created_at"),)

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=new_id)
    org_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("organizations.id", ondelete="CASCADE"))
    user_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(100))
    # base64url without padding, as WebAuthn's JSON carries them.
    credential_id: Mapped[str] = mapped_column(String(1400), unique=True)
    public_key: Mapped[str] = mapped_column(Text)
    sign_count: Mapped[int] = mapped_column(Integer, default=0)
    transports: Mapped[list[str]] = mapped_column(JSONType, default=list)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    last_used_at: Mapped[datetime | None] = mapped_column(default=None)


class PasskeyChallenge(Base):
    """A challenge handed to a browser: used once (deleted by the use that checks it),
    valid until ``expires_at``, kept in the database so any replica can check it."""

    __tablename__ = "passkey_challenges"
    __table_args__ = (Index("ix_passkey_challenges_expires", "expires_at"),)

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=new_id)
    # base64url of the challenge's bytes: what clientDataJSON names.
    challenge: Mapped[str] = mapped_column(String(100), unique=True)
    # "register", "signin" or "decide".
    purpose: Mapped[str] = mapped_column(String(10))
    user_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("users.id", ondelete="CASCADE"), default=None
    )
    # A decision's challenge: what it is derived from besides the nonce.
    request_id: Mapped[uuid.UUID | None] = mapped_column(default=None)
    decision: Mapped[str | None] = mapped_column(String(16), default=None)
    arguments_hash: Mapped[str | None] = mapped_column(String(64), default=None)
    nonce: Mapped[str | None] = mapped_column(String(64), default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    expires_at: Mapped[datetime] = mapped_column()


class DecisionAssertion(Base):
    """The passkey assertion that signed one vote, kept as the browser sent it so that
    it can be exported and verified again later (``passkeys.verify_stored_assertion``)."""

    __tablename__ = "decision_assertions"
    __table_args__ = (Index("ix_decision_assertions_request", "request_id", "created_at"),)

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=new_id)
    org_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("organizations.id", ondelete="CASCADE"))
    request_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("approval_requests.id", ondelete="CASCADE")
    )
    # The step voted, if the request has a chain.
    step_id: Mapped[uuid.UUID | None] = mapped_column(default=None)
    user_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("users.id"))
    decision: Mapped[str] = mapped_column(String(16))
    arguments_hash: Mapped[str] = mapped_column(String(64))
    nonce: Mapped[str] = mapped_column(String(64))
    credential_id: Mapped[str] = mapped_column(String(1400))
    # The registered public key at signing time (COSE, base64url): a passkey removed
    # later leaves its signatures verifiable.
    public_key: Mapped[str] = mapped_column(Text)
    authenticator_data: Mapped[str] = mapped_column(Text)
    client_data_json: Mapped[str] = mapped_column(Text)
    signature: Mapped[str] = mapped_column(Text)
    rp_id: Mapped[str] = mapped_column(String(253))
    origin: Mapped[str] = mapped_column(String(300))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)

    def as_export(self) -> dict[str, Any]:
        """What the audit export carries: enough to verify it with nothing else."""
        return {
            "request_id": str(self.request_id),
            "step_id": str(self.step_id) if self.step_id else None,
            "user_id": str(self.user_id),
            "decision": self.decision,
            "arguments_hash": self.arguments_hash,
            "nonce": self.nonce,
            "credential_id": self.credential_id,
            "public_key": self.public_key,
            "authenticator_data": self.authenticator_data,
            "client_data_json": self.client_data_json,
            "signature": self.signature,
            "rp_id": self.rp_id,
            "origin": self.origin,
        }
