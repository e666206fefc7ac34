"""Comments and the audit trail."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import ForeignKey, Index, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from signoff.common.ids import new_id
from signoff.common.time import utcnow
from signoff.models.base import Base, JSONType


class Comment(Base):
    __tablename__ = "comments"
    __table_args__ = (Index("ix_comments_request_created", "request_id", "created_at"),)

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=new_id)
    org_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("organizations.id", ondelete="CASCADE"))
    request_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("approval_requests.id", ondelete="CASCADE")
    )
    user_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("users.id"))
    body: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class AuditEvent(Base):
    """One row per state change, vote and comment, written in the same transaction."""

    __tablename__ = "audit_events"
    __table_args__ = (
        Index("ix_audit_events_request_created", "request_id", "created_at"),
        # The dashboard's org-wide audit log, newest first.
        Index("ix_audit_events_org_created", "org_id", "created_at"),
        # Its type filter: the types an org's log holds, and one type's events newest first.
        Index("ix_audit_events_org_type_created", "org_id", "type", "created_at"),
    )

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=new_id)
    org_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("organizations.id", ondelete="CASCADE"))
    # None for an event of the org itself (a policy version, a user change...).
    request_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("approval_requests.id", ondelete="CASCADE")
    )
    type: Mapped[str] = mapped_column(String(64))
    actor_id: Mapped[uuid.UUID | None] = mapped_column(default=None)
    data: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    # Its place in the org's hash chain is a row of ``audit_chain`` (models/audit.py),
    # written when it is sealed: the event itself is never written again.
