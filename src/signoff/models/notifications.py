"""Notifications: each org's routing rules and channels, the notification outbox, its
attempt log, and the one-click decision links that messages carry.

A ``Notification`` is one message for one recipient (a person's e-mail address, or a chat
channel) about one request. It is written in the transaction of the change it reports
(a create, a step opening), or ahead of time for reminders, escalations and expiry
warnings, which simply have a later ``due_at``. Workers claim due rows with a lease, the
way they claim callback deliveries (``models/webhooks.py``), so a scheduled message is
sent by one worker, and by another one only when the first died holding it.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import Boolean, ForeignKey, Index, Integer, String, Text, UniqueConstraint, text
from sqlalchemy.orm import Mapped, mapped_column

from signoff.common.ids import new_id
from signoff.common.time import utcnow
from signoff.models.base import Base, JSONType

CHANNEL_TYPES = ("email", "slack", "teams", "discord", "webhook")
NOTIFICATION_KINDS = ("created", "step_opened", "reminder", "escalated", "expiry_warning")
# pending: waiting for its due time or a worker; sent; failed after its last attempt;
# cancelled: the request left pending before a reminder was due, or routing lost its
# channel before it was sent.
NOTIFICATION_STATUSES = ("pending", "sent", "failed", "cancelled")


class RoutingConfig(Base):
    """An org's routing document, stored as validated (``notifications/routing/document.py``)."""

    __tablename__ = "routing_configs"

    org_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("organizations.id", ondelete="CASCADE"), primary_key=True
    )
    document: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_by: Mapped[uuid.UUID | None] = mapped_column(default=None)


class NotificationChannel(Base):
    """Where messages go. Rules name channels by ``name``; secrets live in ``config``,
    encrypted (webhook URLs are credentials: anyone holding one may post)."""

    __tablename__ = "notification_channels"
    __table_args__ = (UniqueConstraint("org_id", "name"),)

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=new_id)
    org_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("organizations.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(100))
    type: Mapped[str] = mapped_column(String(16))
    # Encrypted JSON object: url, bot_token, signing_secret, secret, ... per type.
    config_encrypted: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


class Notification(Base):
    __tablename__ = "notifications"
    __table_args__ = (
        # Workers look only at pending rows, by the time they are due.
        Index(
            "ix_notifications_pending_due",
            "due_at",
            sqlite_where=text("status = 'pending'"),
            postgresql_where=text("status = 'pending'"),
        ),
        Index("ix_notifications_request_created", "request_id", "created_at"),
    )

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=new_id)
    org_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("organizations.id", ondelete="CASCADE"))
    request_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("approval_requests.id", ondelete="CASCADE")
    )
    # The channel it goes through; None once routing no longer has it. The row is a
    # record: removing or renaming a channel never deletes it, and what the log shows of
    # the channel is kept on the row itself, as it was when the row was planned.
    channel_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("notification_channels.id", ondelete="SET NULL"), default=None
    )
    channel_name: Mapped[str] = mapped_column(String(100))
    channel_type: Mapped[str] = mapped_column(String(16))
    kind: Mapped[str] = mapped_column(String(20))
    # An e-mail address for e-mail channels, the channel's name for chat and webhooks.
    recipient: Mapped[str] = mapped_column(String(320))
    # The person the message's one-click links act for (e-mail); None for a channel.
    recipient_user_id: Mapped[uuid.UUID | None] = mapped_column(default=None)
    # Whether the one-click links of this message need a signed-in person too.
    require_sign_in: Mapped[bool] = mapped_column(Boolean, default=False)
    status: Mapped[str] = mapped_column(String(16), default="pending")
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    due_at: Mapped[datetime] = mapped_column(default=utcnow)
    # Set while a worker holds the row; only its holder may record the attempt.
    claim_token: Mapped[uuid.UUID | None] = mapped_column(default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)
    sent_at: Mapped[datetime | None] = mapped_column(default=None)
    last_error: Mapped[str | None] = mapped_column(String(200), default=None)


class NotificationPlan(Base):
    """A change whose notifications are still to be planned: written by the create (or the
    step opening) in its own transaction, the one cheap write it makes. A worker reads
    the routing rules, resolves the audience and writes the ``Notification`` rows, then
    deletes this row, all in one transaction (``notifications/planning/service.plan_waiting``).

    Planning is database work only, so the claim is the row lock that transaction holds
    (``FOR UPDATE SKIP LOCKED`` on PostgreSQL, the write lock on SQLite): a worker killed
    mid-way rolls back and leaves the row for the next, and no two plan one row."""

    __tablename__ = "notification_plans"

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=new_id)
    request_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("approval_requests.id", ondelete="CASCADE")
    )
    # "created" or "step_opened" (a chain was configured, or moved on).
    kind: Mapped[str] = mapped_column(String(20))
    # step_opened: the approvers of the steps that opened (their ids as text).
    approver_ids: Mapped[list[str] | None] = mapped_column(JSONType, default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class NotificationAttempt(Base):
    __tablename__ = "notification_attempts"
    __table_args__ = (
        UniqueConstraint("notification_id", "attempt"),
        Index("ix_notification_attempts_request_created", "request_id", "created_at"),
    )

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=new_id)
    notification_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("notifications.id", ondelete="CASCADE")
    )
    request_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("approval_requests.id", ondelete="CASCADE")
    )
    attempt: Mapped[int] = mapped_column(Integer)
    success: Mapped[bool] = mapped_column(Boolean, default=False)
    # HTTP status for webhooks, the SMTP reply code for e-mail; 0 when none came back.
    status_code: Mapped[int] = mapped_column(Integer, default=0)
    duration_ms: Mapped[int] = mapped_column(Integer, default=0)
    error: Mapped[str | None] = mapped_column(String(200), default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class DecisionLink(Base):
    """A one-click link: the SHA-256 of a random token, bound to one request, one
    decision and (for a person's e-mail) one user. Used once; a GET never uses it."""

    __tablename__ = "decision_links"
    __table_args__ = (Index("ix_decision_links_request", "request_id"),)

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=new_id)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    org_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("organizations.id", ondelete="CASCADE"))
    request_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("approval_requests.id", ondelete="CASCADE")
    )
    # None for a link posted to a channel: whoever opens it must sign in.
    user_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("users.id", ondelete="CASCADE"), default=None
    )
    decision: Mapped[str] = mapped_column(String(16))
    # What carried it ("email", "slack", ...): the audit event's ``via``.
    via: Mapped[str] = mapped_column(String(16))
    require_sign_in: Mapped[bool] = mapped_column(Boolean, default=False)
    expires_at: Mapped[datetime] = mapped_column()
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    used_at: Mapped[datetime | None] = mapped_column(default=None)
