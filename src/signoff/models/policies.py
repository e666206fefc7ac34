"""Policies: each org's policy documents, one row per saved version, and the budget
counters of ``auto_approve`` rules (``policies/``, docs/policies.md)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import Float, ForeignKey, Integer, String, UniqueConstraint
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
