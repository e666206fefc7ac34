"""Every query on groups and their members."""

from __future__ import annotations

import uuid
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Table, delete, func, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession

from signoff.models import Group, GroupMember, User

_MEMBERS: Table = GroupMember.__table__  # type: ignore[assignment]


@dataclass(frozen=True)
class GroupRow:
    id: uuid.UUID
    name: str
    member_count: int
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True)
class MemberRow:
    id: uuid.UUID
    email: str
    name: str
    deactivated_at: datetime | None


@dataclass(frozen=True)
class UserState:
    """A user named by a change to members: whether they may be added."""

    id: uuid.UUID
    deactivated_at: datetime | None


class GroupRepository:
    def __init__(self, session: AsyncSession, dialect: str) -> None:
        self.session = session
        self.dialect = dialect

    # ---- groups ----

    async def list_groups(self, org_id: uuid.UUID) -> list[GroupRow]:
        """The org's groups by name (on the (org_id, lower(name)) index), with how many
        members each has (on the members' primary key)."""
        count = (
            select(func.count())
            .where(GroupMember.group_id == Group.id)
            .correlate(Group)
            .scalar_subquery()
        )
        rows = await self.session.execute(
            select(Group.id, Group.name, count, Group.created_at, Group.updated_at)
            .where(Group.org_id == org_id)
            .order_by(func.lower(Group.name), Group.id)
        )
        return [GroupRow(*row) for row in rows]

    async def count_groups(self, org_id: uuid.UUID) -> int:
        found = await self.session.scalar(
            select(func.count()).select_from(Group).where(Group.org_id == org_id)
        )
        return int(found or 0)

    async def get(self, org_id: uuid.UUID, group_id: uuid.UUID) -> Group | None:
        found = await self.session.execute(
            select(Group)
            .where(Group.id == group_id, Group.org_id == org_id)
            .execution_options(populate_existing=True)
        )
        return found.scalar_one_or_none()

    async def find_by_name(self, org_id: uuid.UUID, name: str) -> Group | None:
        found = await self.session.execute(
            select(Group).where(Group.org_id == org_id, func.lower(Group.name) == func.lower(name))
        )
        return found.scalar_one_or_none()

    async def lock(self, org_id: uuid.UUID, group_id: uuid.UUID, now: datetime) -> bool:
        """Mark the group changed now, as the change's first write: it holds the group's
        row (PostgreSQL) or the database (SQLite) until the commit, so two changes to one
        group's members run one after the other. False: no such group in the org."""
        done = await self.session.execute(
            update(Group)
            .where(Group.id == group_id, Group.org_id == org_id)
            .values(updated_at=now)
            .returning(Group.id)
            .execution_options(synchronize_session=False)
        )
        return done.first() is not None

    async def add(self, group: Group) -> None:
        self.session.add(group)
        await self.session.flush()

    async def rename(self, group: Group, name: str, now: datetime) -> None:
        group.name = name
        group.updated_at = now
        await self.session.flush()

    async def delete(self, group: Group) -> None:
        """The group and its member rows (the foreign key's cascade, said here too for
        SQLite connections without foreign keys on)."""
        await self.session.execute(delete(GroupMember).where(GroupMember.group_id == group.id))
        await self.session.delete(group)
        await self.session.flush()

    # ---- members ----

    async def members(self, group_id: uuid.UUID) -> list[MemberRow]:
        rows = await self.session.execute(
            select(User.id, User.email, User.name, User.deactivated_at)
            .join(GroupMember, GroupMember.user_id == User.id)
            .where(GroupMember.group_id == group_id)
            .order_by(func.lower(User.name), User.email)
        )
        return [MemberRow(*row) for row in rows]

    async def member_ids(self, group_id: uuid.UUID) -> set[uuid.UUID]:
        rows = await self.session.execute(
            select(GroupMember.user_id).where(GroupMember.group_id == group_id)
        )
        return set(rows.scalars())

    async def add_members(
        self, group_id: uuid.UUID, user_ids: Collection[uuid.UUID], now: datetime
    ) -> None:
        """Add each user once; one already in the group stays as they were."""
        if not user_ids:
            return
        insert = (postgresql.insert if self.dialect == "postgresql" else sqlite.insert)(_MEMBERS)
        rows = [{"group_id": group_id, "user_id": uid, "added_at": now} for uid in user_ids]
        await self.session.execute(insert.on_conflict_do_nothing(), rows)

    async def remove_members(self, group_id: uuid.UUID, user_ids: Collection[uuid.UUID]) -> int:
        if not user_ids:
            return 0
        done = await self.session.execute(
            delete(GroupMember)
            .where(GroupMember.group_id == group_id, GroupMember.user_id.in_(list(user_ids)))
            .returning(GroupMember.user_id)
        )
        return len(done.all())

    async def users_of_org(
        self, org_id: uuid.UUID, user_ids: Collection[uuid.UUID]
    ) -> dict[uuid.UUID, UserState]:
        """Those of ``user_ids`` who are users of the org (another org's are not)."""
        if not user_ids:
            return {}
        rows = await self.session.execute(
            select(User.id, User.deactivated_at).where(
                User.org_id == org_id, User.id.in_(list(user_ids))
            )
        )
        return {row.id: UserState(*row) for row in rows}

    # ---- what a quorum or a chain step naming a group reads ----

    async def active_member_ids(self, org_id: uuid.UUID, group_id: uuid.UUID) -> list[uuid.UUID]:
        """The group's members who may act now (not deactivated), by id; none when the
        group is not the org's. On the members' primary key, then each user's."""
        rows = await self.session.execute(
            select(GroupMember.user_id)
            .join(Group, Group.id == GroupMember.group_id)
            .join(User, User.id == GroupMember.user_id)
            .where(
                GroupMember.group_id == group_id,
                Group.org_id == org_id,
                User.deactivated_at.is_(None),
            )
            .order_by(GroupMember.user_id)
        )
        return list(rows.scalars())

    async def groups_of_user(self, org_id: uuid.UUID, user_id: uuid.UUID) -> Sequence[uuid.UUID]:
        """The ids of the org's groups the user is in, on the ``user_id`` index."""
        rows = await self.session.execute(
            select(GroupMember.group_id)
            .join(Group, Group.id == GroupMember.group_id)
            .where(GroupMember.user_id == user_id, Group.org_id == org_id)
            .order_by(GroupMember.group_id)
        )
        return list(rows.scalars())
