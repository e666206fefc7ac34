"""One-time links to set a password: an invitation, or an admin's password reset.

Only the SHA-256 of the link's token is kept: it is a long random string, so a fast hash
is enough, and a leaked table opens nothing. A link works once (``used_at`` is set by the
compare-and-set that redeems it) and only until ``expires_at``.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import ForeignKey, Index, String
from sqlalchemy.orm import Mapped, mapped_column

from signoff.common.ids import new_id
from signoff.common.time import utcnow
from signoff.models.base import Base


class PasswordLink(Base):
    __tablename__ = "password_links"
    __table_args__ = (Index(None, "user_id"),)

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=new_id)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    user_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    # "invite" (a new user's first password) or "reset" (an admin's password reset).
    purpose: Mapped[str] = mapped_column(String(10))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    expires_at: Mapped[datetime] = mapped_column()
    used_at: Mapped[datetime | None] = mapped_column(default=None)
