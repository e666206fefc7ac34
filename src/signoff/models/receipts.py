"""Approval receipts and the keys that sign them.

A receipt is a bearer credential: the signed token is kept only encrypted with the app's
secret box (``token_encrypted``), so a copy of the table redeems nothing. Its row counts
the redeems; a conditional update (``uses < max_uses``) makes each use count once.
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
    token_encrypted: Mapped[str] = mapped_column(Text)
    issued_at: Mapped[datetime] = mapped_column()
    expires_at: Mapped[datetime] = mapped_column()
    max_uses: Mapped[int] = mapped_column(Integer, default=1)
    uses: Mapped[int] = mapped_column(Integer, default=0)
