"""Decision callbacks: the outbox of deliveries and the log of their attempts.

A ``WebhookDelivery`` is one event for one URL, written in the same transaction as the
state change it reports (so an acknowledged decision is never without its callback). Its
body bytes are fixed then and resent unchanged. ``due_at`` is the one clock a worker
reads: when an unclaimed delivery is due, or when the lease of a claimed one runs out,
which is what lets any worker finish the job of one that died.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import (
    Boolean,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column

from signoff.common.ids import new_id
from signoff.common.time import utcnow
from signoff.models.base import Base

DELIVERY_STATUSES = ("pending", "succeeded", "failed")


class WebhookDelivery(Base):
    __tablename__ = "webhook_deliveries"
    __table_args__ = (
        # Workers look only at pending rows, by the time they are due.
        Index(
            "ix_webhook_deliveries_pending_due",
            "due_at",
            sqlite_where=text("status = 'pending'"),
            postgresql_where=text("status = 'pending'"),
        ),
        Index("ix_webhook_deliveries_request_created", "request_id", "created_at"),
        # The dashboard's delivery log of an org, newest first.
        Index("ix_webhook_deliveries_org_created", "org_id", "created_at"),
    )

    # Also the Standard Webhooks ``webhook-id`` and ``X-Service-Delivery-Id``.
    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=new_id)
    org_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("organizations.id", ondelete="CASCADE"))
    request_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("approval_requests.id", ondelete="CASCADE")
    )
    # Whose webhook secret signs it: the connection that created the request.
    connection_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("connections.id"))
    event: Mapped[str] = mapped_column(String(64))
    url: Mapped[str] = mapped_column(Text)
    # host:port of the URL, so a worker can hold back a receiver it already keeps busy.
    target: Mapped[str] = mapped_column(String(300))
    body: Mapped[bytes] = mapped_column(LargeBinary)
    # The request's callback_headers, still encrypted (they often carry credentials).
    headers_encrypted: Mapped[str | None] = mapped_column(Text, default=None)
    # The approval's receipt, encrypted: a bearer credential is not kept in the body; it
    # is put into the body when an attempt is signed (``service.body_to_send``).
    receipt_encrypted: Mapped[str | None] = mapped_column(Text, default=None)
    # The X-Request-Id of the API call (or background run) that wrote it, sent on every
    # attempt so a receiver's logs and ours can be matched.
    request_id_header: Mapped[str | None] = mapped_column(String(128), default=None)
    status: Mapped[str] = mapped_column(String(16), default="pending")
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    due_at: Mapped[datetime] = mapped_column(default=utcnow)
    # Set while someone holds the delivery; only its holder may record the attempt.
    claim_token: Mapped[uuid.UUID | None] = mapped_column(default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)
    last_attempt_at: Mapped[datetime | None] = mapped_column(default=None)
    delivered_at: Mapped[datetime | None] = mapped_column(default=None)


class WebhookAttempt(Base):
    """One attempt of one delivery: the delivery log entry (interface.md section 2.4)."""

    __tablename__ = "webhook_attempts"
    __table_args__ = (
        UniqueConstraint("delivery_id", "attempt"),
        # The listing: newest first within an org, optionally for one request.
        Index("ix_webhook_attempts_org_created", "org_id", "created_at", "id"),
        Index("ix_webhook_attempts_request_created", "request_id", "created_at", "id"),
    )

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=new_id)
    delivery_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("webhook_deliveries.id", ondelete="CASCADE")
    )
    org_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("organizations.id", ondelete="CASCADE"))
    request_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("approval_requests.id", ondelete="CASCADE")
    )
    url: Mapped[str] = mapped_column(Text)
    attempt: Mapped[int] = mapped_column(Integer)
    # 0 when no HTTP answer came back (see ``error``).
    status_code: Mapped[int] = mapped_column(Integer, default=0)
    success: Mapped[bool] = mapped_column(Boolean, default=False)
    duration_ms: Mapped[int] = mapped_column(Integer, default=0)
    response_body: Mapped[str | None] = mapped_column(Text, default=None)
    error: Mapped[str | None] = mapped_column(String(100), default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
