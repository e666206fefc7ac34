"""Every query on one-click decision links."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from signoff.models.notifications import DecisionLink


class LinkQueries:
    """The links of messages (``NotificationRepository`` is one)."""

    session: AsyncSession

    def add_links(self, links: Sequence[DecisionLink]) -> None:
        self.session.add_all(links)

    async def find_link(self, token_hash: str) -> DecisionLink | None:
        return await self.session.scalar(
            select(DecisionLink).where(DecisionLink.token_hash == token_hash)
        )

    async def use_link(self, link_id: uuid.UUID, now: datetime) -> bool:
        """Mark a link used; False if someone used it first (the compare-and-set)."""
        result = await self.session.execute(
            update(DecisionLink)
            .where(DecisionLink.id == link_id, DecisionLink.used_at.is_(None))
            .values(used_at=now)
            .execution_options(synchronize_session=False)
        )
        return bool(result.rowcount == 1)  # type: ignore[attr-defined]
