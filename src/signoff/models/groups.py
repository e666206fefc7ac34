"""Groups of people an org names, and who is in each (``groups/``, docs/groups.md).

A ``require`` policy effect or a chain step may later name a group: it reads the group's
active members through ``group_members`` (by group, on the primary key) and a person's
groups through the ``user_id`` index.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import ForeignKey, Index, String, func
from sqlalchemy.orm import Mapped, mapped_column

from signoff.common.ids import new_id
from signoff.common.time import utcnow
from signoff.models.base import Base


class Group(Base):
    __tablename__ = "groups"

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=new_id)
    org_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("organizations.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(100))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    # Raised by every change to the group: its name or its members.
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


# Names are unique per org, ignoring case ("Finance" and "finance" are one group); the
# same index lists an org's groups by name.
Index("uq_groups_org_id_name_lower", Group.org_id, func.lower(Group.name), unique=True)


class GroupMember(Base):
    __tablename__ = "group_members"
    # A person's groups (``groups_of_user``), and their rows when they leave.
    __table_args__ = (Index(None, "user_id"),)

    group_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("groups.id", ondelete="CASCADE"), primary_key=True
    )
    user_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("users.id", ondelete="CASCADE"), primary_key=True
    )
    added_at: Mapped[datetime] = mapped_column(default=utcnow)
