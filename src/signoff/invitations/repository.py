"""Every query on password links (invitations and password resets)."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from signoff.models import PasswordLink, User


class PasswordLinkRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def add(self, link: PasswordLink) -> None:
        self.session.add(link)
        await self.session.flush()

    async def retire_open_links(self, user_id: uuid.UUID, now: datetime) -> None:
        """Only the newest link of a person works: the earlier ones are spent now."""
        await self.session.execute(
            update(PasswordLink)
            .where(PasswordLink.user_id == user_id, PasswordLink.used_at.is_(None))
            .values(used_at=now)
        )

    async def find_open(self, token_hash: str, now: datetime) -> tuple[PasswordLink, User] | None:
        """The unused, unexpired link with this hash, and its active user."""
        row = (
            await self.session.execute(
                select(PasswordLink, User)
                .join(User, User.id == PasswordLink.user_id)
                .where(
                    PasswordLink.token_hash == token_hash,
                    PasswordLink.used_at.is_(None),
                    PasswordLink.expires_at > now,
                    User.deactivated_at.is_(None),
                )
            )
        ).first()
        return (row[0], row[1]) if row is not None else None

    async def redeem(self, token_hash: str, now: datetime) -> uuid.UUID | None:
        """Spend the link: a compare-and-set, so of two uses at once only one gets its
        user's id (PostgreSQL re-checks the condition after the winner commits; SQLite
        has one writer). None when it is used, expired or unknown."""
        return await self.session.scalar(
            update(PasswordLink)
            .where(
                PasswordLink.token_hash == token_hash,
                PasswordLink.used_at.is_(None),
                PasswordLink.expires_at > now,
            )
            .values(used_at=now)
            .returning(PasswordLink.user_id)
        )

    async def invited_user_ids(self, org_id: uuid.UUID, now: datetime) -> set[uuid.UUID]:
        """The org's people whose invitation still works (the users page marks them)."""
        result = await self.session.scalars(
            select(PasswordLink.user_id)
            .join(User, User.id == PasswordLink.user_id)
            .where(
                User.org_id == org_id,
                PasswordLink.purpose == "invite",
                PasswordLink.used_at.is_(None),
                PasswordLink.expires_at > now,
            )
        )
        return set(result.all())
