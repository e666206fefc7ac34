"""Organizations, their users and their connections (decisions.md section 1)."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import (
    Boolean,
    CheckConstraint,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    func,
)
from sqlalchemy.orm import Mapped, mapped_column

from signoff.common.ids import new_id
from signoff.common.time import utcnow
from signoff.models.base import Base


class Organization(Base):
    __tablename__ = "organizations"

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=new_id)
    name: Mapped[str] = mapped_column(String(200))
    emergency_stop: Mapped[bool] = mapped_column(Boolean, default=False)
    # Who turned the stop on last, and when: the dashboard's emergency-stop page says it.
    emergency_stop_at: Mapped[datetime | None] = mapped_column(default=None)
    emergency_stop_by: Mapped[uuid.UUID | None] = mapped_column(default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


# Names are unique per installation, ignoring case: ``--org NAME`` must name one org.
# ``lower`` folds ASCII letters on SQLite and every cased letter on PostgreSQL.
Index("uq_organizations_name_lower", func.lower(Organization.name), unique=True)


class User(Base):
    __tablename__ = "users"
    __table_args__ = (UniqueConstraint("org_id", "email"),)

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=new_id)
    org_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("organizations.id", ondelete="CASCADE"))
    email: Mapped[str] = mapped_column(String(320))
    name: Mapped[str] = mapped_column(String(200))
    role: Mapped[str] = mapped_column(String(20), default="member")
    # argon2id hash; null for users who may not sign in to the dashboard.
    password_hash: Mapped[str | None] = mapped_column(String(200), default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    # A deactivated user can no longer sign in, and their sign-in sessions end at once.
    deactivated_at: Mapped[datetime | None] = mapped_column(default=None)

    @property
    def is_active(self) -> bool:
        return self.deactivated_at is None


class Connection(Base):
    """An integration's identity: one API key, one webhook secret, one rate limit."""

    __tablename__ = "connections"
    __table_args__ = (Index(None, "org_id", "created_at"),)

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=new_id)
    org_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("organizations.id", ondelete="CASCADE"))
    owner_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("users.id"))
    name: Mapped[str] = mapped_column(String(200))
    rate_limit_per_hour: Mapped[int] = mapped_column(Integer)
    # SHA-256 hex of the whole key; the key itself is never stored.
    api_key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    api_key_prefix: Mapped[str] = mapped_column(String(16))
    # Encrypted at rest (crypto.py): signing needs the secret itself, so it cannot be hashed.
    webhook_secret_encrypted: Mapped[str] = mapped_column(Text)
    previous_webhook_secret_encrypted: Mapped[str | None] = mapped_column(Text, default=None)
    previous_webhook_secret_expires_at: Mapped[datetime | None] = mapped_column(default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(default=None)
    # When its API key last authenticated a call: written at most once a minute per
    # connection (auth/last_used.py), so it lags the last call by up to a minute.
    last_used_at: Mapped[datetime | None] = mapped_column(default=None)


class SetupLink(Base):
    """The first-run setup link that ``signoff serve`` logs on an empty database.

    One row at most (its id is always 1), holding the SHA-256 of the newest link only:
    a start replaces the link of every earlier start. Every use of a link, and every new
    organization, updates this same row, so the database lets one of them through at a
    time, whichever replica or process makes it: a second submission finds the link used.
    """

    __tablename__ = "setup_link"
    __table_args__ = (CheckConstraint("id = 1", name="single_row"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    # Null once used, or once an organization exists: no link works then.
    token_hash: Mapped[str | None] = mapped_column(String(64), default=None)
    issued_at: Mapped[datetime] = mapped_column(default=utcnow)
    used_at: Mapped[datetime | None] = mapped_column(default=None)
