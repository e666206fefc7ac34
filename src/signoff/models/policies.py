"""Policies: each org's policy documents, one row per saved version, the budget
counters of ``auto_approve`` rules, and standing approvals (``policies/``,
docs/policies.md)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import Float, ForeignKey, Index, Integer, String, UniqueConstraint, text
from sqlalchemy.orm import Mapped, mapped_column

from signoff.common.ids import new_id
from signoff.common.time import utcnow
from signoff.models.base import Base, JSONType


class PolicyDocument(Base):
    """One saved version of an org's policy document; the highest version is in force.
    A restore saves an old version's rules anew, so history only grows."""

    __tablename__ = "policy_documents"
    __table_args__ = (UniqueConstraint("org_id", "version"),)

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=new_id)
    org_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("organizations.id", ondelete="CASCADE"))
    version: Mapped[int] = mapped_column(Integer)
    rules: Mapped[list[Any]] = mapped_column(JSONType, default=list)
    author_id: Mapped[uuid.UUID | None] = mapped_column(default=None)
    author_name: Mapped[str | None] = mapped_column(String(200), default=None)
    restored_from: Mapped[int | None] = mapped_column(Integer, default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class PolicyBudgetUsage(Base):
    """What one budget of one rule has spent in one window, for one connection or action
    type: raised by one conditional upsert per auto-approval, so concurrent creates on
    any number of replicas never spend past the cap."""

    __tablename__ = "policy_budget_usage"

    org_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("organizations.id", ondelete="CASCADE"), primary_key=True
    )
    rule: Mapped[str] = mapped_column(String(100), primary_key=True)
    scope_key: Mapped[str] = mapped_column(String(200), primary_key=True)
    window_start: Mapped[datetime] = mapped_column(primary_key=True)
    count: Mapped[int] = mapped_column(Integer, default=0)
    total: Mapped[float] = mapped_column(Float, default=0.0)


class StandingApproval(Base):
    """ "Don't ask again": an approver's approval of later requests of one connection and
    action type whose arguments meet ``arguments`` (per name ``{"eq": value}`` or
    ``{"max": number}``), until ``expires_at`` and for at most ``max_uses`` of them
    (either may be null, never both). ``uses`` is raised by one conditional UPDATE per
    request it approves (``policies.standing_repository``), so concurrent creates never
    use it past ``max_uses``."""

    __tablename__ = "standing_approvals"
    __table_args__ = (
        # The create's lookup: the live ones of the request's org, connection and action
        # type, their expiry tested in the index.
        Index(
            "ix_standing_approvals_lookup",
            "org_id",
            "connection_id",
            "action_type",
            "expires_at",
            sqlite_where=text("revoked_at IS NULL"),
            postgresql_where=text("revoked_at IS NULL"),
        ),
        # The list of what stands in an org, newest first.
        Index(
            "ix_standing_approvals_org_created",
            "org_id",
            "created_at",
            sqlite_where=text("revoked_at IS NULL"),
            postgresql_where=text("revoked_at IS NULL"),
        ),
    )

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=new_id)
    org_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("organizations.id", ondelete="CASCADE"))
    connection_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("connections.id", ondelete="CASCADE")
    )
    action_type: Mapped[str] = mapped_column(String(100))
    arguments: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    expires_at: Mapped[datetime | None] = mapped_column(default=None)
    max_uses: Mapped[int | None] = mapped_column(Integer, default=None)
    uses: Mapped[int] = mapped_column(Integer, default=0)
    # No foreign keys to the user and the request: a grant outlives a purged request,
    # and it names its grantor as they were named then.
    granted_by: Mapped[uuid.UUID] = mapped_column()
    granted_by_name: Mapped[str] = mapped_column(String(200))
    request_id: Mapped[uuid.UUID] = mapped_column()
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(default=None)
    revoked_by: Mapped[uuid.UUID | None] = mapped_column(default=None)
