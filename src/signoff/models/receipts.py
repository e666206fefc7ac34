"""Approval receipts and the keys that sign them.

A receipt is a bearer credential. Its row holds its claims, not its token: the token is
signed again on each read with the key its ``kid`` names (Ed25519 is deterministic, so
every read gives the same bytes), and the private keys stay encrypted with the app's secret
box, so a copy of the tables redeems nothing. Its row counts the redeems; a conditional
update (``uses < max_uses``) makes each use count once. Tokens stored before 0048 that
its columns cannot rebuild are kept, encrypted, in ``stored_receipt_tokens``.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import Boolean, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from signoff.common.time import utcnow
from signoff.models.base import Base, JSONType


class SigningKey(Base):
    """An Ed25519 key receipts are signed with; the newest unretired one signs."""

    __tablename__ = "signing_keys"

    kid: Mapped[str] = mapped_column(String(64), primary_key=True)
    # The public key as a JWK (kty OKP, crv Ed25519, x), listed at /.well-known/jwks.json.
    public_jwk: Mapped[dict[str, Any]] = mapped_column(JSONType)
    # The private key (PKCS#8 PEM), encrypted with the app's secret box.
    private_key_encrypted: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    # True for the one key that signs, null for the others: unique, so two processes
    # that both find no key make one between them (the loser reads the winner's).
    current: Mapped[bool | None] = mapped_column(Boolean, unique=True, default=True)
    # Set when a newer key took over: it signs nothing more, and is listed until the
    # last receipt it signed has expired.
    retired_at: Mapped[datetime | None] = mapped_column(default=None)


class Receipt(Base):
    """The receipt a request's approval issued (one per request)."""

    __tablename__ = "receipts"
    __table_args__ = (Index(None, "kid", "expires_at"),)

    jti: Mapped[uuid.UUID] = mapped_column(primary_key=True)
    request_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("approval_requests.id", ondelete="CASCADE"), unique=True
    )
    org_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("organizations.id", ondelete="CASCADE"))
    kid: Mapped[str] = mapped_column(String(64))
    # The claims the token is signed from (null on rows stored with their token, 0048).
    issuer: Mapped[str | None] = mapped_column(Text, default=None)
    action_type: Mapped[str | None] = mapped_column(Text, default=None)
    arguments_hash: Mapped[str | None] = mapped_column(String(64), default=None)
    preview_hash: Mapped[str | None] = mapped_column(String(64), default=None)
    decided_by: Mapped[list[str] | None] = mapped_column(JSONType, default=None)
    issued_at: Mapped[datetime] = mapped_column()
    expires_at: Mapped[datetime] = mapped_column()
    max_uses: Mapped[int] = mapped_column(Integer, default=1)
    uses: Mapped[int] = mapped_column(Integer, default=0)


class StoredReceiptToken(Base):
    """A token stored before receipts were signed on read that its row cannot rebuild
    (migration 0048): served as stored, encrypted with the app's secret box."""

    __tablename__ = "stored_receipt_tokens"

    jti: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("receipts.jti", ondelete="CASCADE"), primary_key=True
    )
    token_encrypted: Mapped[str] = mapped_column(Text)
