"""Every query on an org's routing document and its channels."""

from __future__ import annotations

import uuid
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from signoff.models.notifications import Notification, NotificationChannel, RoutingConfig
from signoff.storage import PreparedQuery, channel_presence, execute_in

_ROUTING_RULES = PreparedQuery(
    select(
        RoutingConfig.document.label("document"), RoutingConfig.updated_at.label("updated_at")
    ).where(RoutingConfig.org_id == bindparam("org_id"))
)


@dataclass(frozen=True)
class ChannelRef:
    """What the create path needs of a channel: no secrets, nothing decrypted."""

    id: uuid.UUID
    type: str


class RoutingQueries:
    """The routing document and channels (``NotificationRepository`` is one)."""

    session: AsyncSession
    dialect: str

    async def get_routing(self, org_id: uuid.UUID) -> RoutingConfig | None:
        return await self.session.get(RoutingConfig, org_id)

    async def save_routing(
        self, org_id: uuid.UUID, document: dict[str, Any], user_id: uuid.UUID | None, now: datetime
    ) -> None:
        existing = await self.get_routing(org_id)
        if existing is None:
            self.session.add(
                RoutingConfig(org_id=org_id, document=document, updated_at=now, updated_by=user_id)
            )
        else:
            existing.document = document
            existing.updated_at = now
            existing.updated_by = user_id
        await self.session.flush()

    async def routing_rules(self, org_id: uuid.UUID) -> tuple[list[Any], datetime] | None:
        """The org's stored rules and their version (when they last changed)."""
        # Every create asks (``on_request_created``): a prepared read, past the ORM.
        rows = await execute_in(self.session, _ROUTING_RULES, {"org_id": org_id})
        return None if not rows else (list(rows[0].document.get("rules", [])), rows[0].updated_at)

    async def channel_refs(self, org_id: uuid.UUID) -> dict[str, ChannelRef]:
        rows = await self.session.execute(
            select(
                NotificationChannel.name, NotificationChannel.id, NotificationChannel.type
            ).where(NotificationChannel.org_id == org_id)
        )
        return {name: ChannelRef(channel_id, kind) for name, channel_id, kind in rows}

    async def channels(self, org_id: uuid.UUID) -> Sequence[NotificationChannel]:
        result = await self.session.scalars(
            select(NotificationChannel)
            .where(NotificationChannel.org_id == org_id)
            .order_by(NotificationChannel.name)
        )
        return result.all()

    async def get_channel(self, channel_id: uuid.UUID) -> NotificationChannel | None:
        return await self.session.get(NotificationChannel, channel_id)

    async def add_channel(self, channel: NotificationChannel) -> None:
        # SQLite creates that trusted "no channel" stop trusting it (``channel_presence``;
        # PostgreSQL's creates ask in their own statement).
        if self.dialect == "sqlite":
            channel_presence.channel_written()
        self.session.add(channel)

    async def void_pending_of_channels(
        self, channel_ids: Collection[uuid.UUID], now: datetime, reason: str
    ) -> None:
        """Cancel what the channels still had to send. A row a sender holds right now keeps
        its claim: that sender records the send it is making (sent, or failed; a retry
        leaves it cancelled), so the log says what happened."""
        if channel_ids:
            await self.session.execute(
                update(Notification)
                .where(
                    Notification.channel_id.in_(list(channel_ids)),
                    Notification.status == "pending",
                )
                .values(status="cancelled", updated_at=now, last_error=reason)
                .execution_options(synchronize_session=False)
            )

    async def delete_channel(self, channel: NotificationChannel) -> None:
        await self.session.delete(channel)
