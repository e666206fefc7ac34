"""The audit chain's per-org head and its signed checkpoints (docs/audit.md)."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import BigInteger, ForeignKey, Index, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from signoff.common.ids import new_id
from signoff.common.time import utcnow
from signoff.models.base import Base


class AuditChainHead(Base):
    """One row per org: the last sealed event, the last checkpoint and how far the
    worker has verified. Sealing locks this row, so one org's chain grows one
    transaction at a time on both databases."""

    __tablename__ = "audit_chain_heads"

    org_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("organizations.id", ondelete="CASCADE"), primary_key=True
    )
    seq: Mapped[int] = mapped_column(BigInteger)
    hash: Mapped[str] = mapped_column(String(64))
    checkpoint_seq: Mapped[int] = mapped_column(BigInteger)
    checkpoint_at: Mapped[datetime | None] = mapped_column(default=None)
    verified_seq: Mapped[int] = mapped_column(BigInteger)
    verified_hash: Mapped[str] = mapped_column(String(64))
    verified_at: Mapped[datetime | None] = mapped_column(default=None)
    verify_failed_seq: Mapped[int | None] = mapped_column(BigInteger, default=None)


class AuditCheckpoint(Base):
    """A signed head: ``kind`` is ``head`` or ``pruned`` (events up to ``seq`` purged)."""

    __tablename__ = "audit_checkpoints"
    __table_args__ = (Index("ix_audit_checkpoints_org_seq", "org_id", "seq"),)

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=new_id)
    org_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("organizations.id", ondelete="CASCADE"))
    kind: Mapped[str] = mapped_column(String(16))
    seq: Mapped[int] = mapped_column(BigInteger)
    hash: Mapped[str] = mapped_column(String(64))
    jws: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class AuditChainLink(Base):
    """An event's place in its org's chain, appended when the sealer chains it
    (audit/service.py ``seal_org``): one row per (org, seq), so no fork is written, and
    one per event. Rows are only ever inserted, so sealing never rewrites the event."""

    __tablename__ = "audit_chain"
    __table_args__ = (
        Index("ux_audit_chain_event", "event_id", unique=True),
        {"sqlite_with_rowid": False},
    )

    # No key to organizations: the event's own cascades from its org to this row.
    org_id: Mapped[uuid.UUID] = mapped_column(primary_key=True)
    seq: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    event_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("audit_events.id", ondelete="CASCADE"))
    prev_hash: Mapped[str] = mapped_column(String(64))
    hash: Mapped[str] = mapped_column(String(64))


class AuditUnsealed(Base):
    """The events waiting to be chained, one row each: on PostgreSQL a trigger on
    ``audit_events`` (migration 0044) adds it in the transaction that writes the event,
    whatever writes it; the sealer deletes it as it chains the event. A short table, so
    finding what to seal never reads the events table's indexes. SQLite lists nothing
    since migration 0055 (its sealer follows the rowid past ``audit_seal_mark``), only the
    events that were waiting when it ran, chained first."""

    __tablename__ = "audit_unsealed"
    __table_args__ = ({"sqlite_with_rowid": False},)

    org_id: Mapped[uuid.UUID] = mapped_column(primary_key=True)
    event_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("audit_events.id", ondelete="CASCADE"), primary_key=True
    )
