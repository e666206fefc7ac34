"""Every query of the sender on the outbox: claims, the claimed rows and their
requests, what became of each send.

Claims are the callback outbox's (``webhooks/repository.py``): one ``UPDATE ... WHERE id
IN (SELECT ... due ... FOR UPDATE SKIP LOCKED) RETURNING`` statement; on SQLite the
writer holds the database, so the statement is a claim by itself.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple, cast

from sqlalchemy import Table, insert, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from signoff.approvals.repository import with_notified_request
from signoff.models.notifications import Notification, NotificationAttempt, NotificationChannel
from signoff.notifications.routing.document import RequestFacts, facts_of
from signoff.storage import not_among

_ATTEMPTS = cast(Table, NotificationAttempt.__table__)


class ClaimedNotification(NamedTuple):
    """What a send needs of a claimed notification row."""

    id: uuid.UUID
    request_id: uuid.UUID
    kind: str
    recipient: str
    recipient_user_id: uuid.UUID | None
    require_sign_in: bool
    attempts: int


# Labelled apart from the request's columns (``approvals/repository.NOTIFIED_COLUMNS``),
# which share names.
_CLAIMED_COLUMNS = tuple(
    getattr(Notification, name).label(f"notification_{name}")
    for name in ClaimedNotification._fields
)


@dataclass(frozen=True)
class ClaimedRow:
    notification: ClaimedNotification
    channel: NotificationChannel
    request: RequestFacts
    request_status: str


class OutboxQueries:
    """The sender's claims and records (``NotificationRepository`` is one)."""

    session: AsyncSession

    async def claim_due(
        self,
        token: uuid.UUID,
        now: datetime,
        lease_until: datetime,
        limit: int,
        skip_channels: Collection[uuid.UUID] = (),
    ) -> int:
        """Lease up to ``limit`` due rows to ``token``; how many. Rows of ``skip_channels``
        (chat channels that must wait for their interval) stay where they are.

        One statement, whose candidates are a subquery: a digest's hundred ids never
        travel to Python and back as a hundred parameters (on SQLite the writer, and the
        event loop, were held while SQLAlchemy expanded and converted them)."""
        candidates = (
            select(Notification.id)
            .where(
                Notification.status == "pending",
                Notification.due_at <= now,
                *not_among(Notification.channel_id, skip_channels),
            )
            .order_by(Notification.due_at)
            .limit(limit)
            .with_for_update(skip_locked=True)
        )
        result = await self.session.execute(
            update(Notification)
            .where(Notification.id.in_(candidates.scalar_subquery()))
            .values(claim_token=token, due_at=lease_until, updated_at=now)
            .execution_options(synchronize_session=False)
        )
        return int(result.rowcount)  # type: ignore[attr-defined]

    async def claimed_piece(
        self,
        token: uuid.UUID,
        lease_until: datetime,
        after: uuid.UUID | None,
        limit: int,
        channels: dict[uuid.UUID, NotificationChannel],
    ) -> tuple[list[ClaimedRow], uuid.UUID | None]:
        """Up to ``limit`` rows that ``claim_due`` leased to ``token`` (until
        ``lease_until``), with their requests' facts, by id after ``after``; and the last
        id read, to go on from (None once there is no more). ``channels``: those already
        read, by id; the piece adds the ones it needs.

        In pieces because on SQLite a read runs on the event loop without a break, and
        turning a digest's hundred rows into Python objects held it for several
        milliseconds at a time; between pieces the API's requests get their turn."""
        width = len(_CLAIMED_COLUMNS)
        query = (
            with_notified_request(
                select(*_CLAIMED_COLUMNS, Notification.channel_id), Notification.request_id
            )
            .where(
                # The claim moved them here: the pending rows' index finds them.
                Notification.status == "pending",
                Notification.due_at == lease_until,
                Notification.claim_token == token,
            )
            .order_by(Notification.id)
            .limit(limit)
        )
        if after is not None:
            query = query.where(Notification.id > after)
        rows = (await self.session.execute(query)).all()
        missing = {row.channel_id for row in rows} - channels.keys()
        if missing:
            found = await self.session.scalars(
                select(NotificationChannel).where(NotificationChannel.id.in_(list(missing)))
            )
            channels.update((c.id, c) for c in found)
        claimed = [
            ClaimedRow(
                ClaimedNotification(*row[:width]),
                channels[row.channel_id],
                facts_of(row),
                row.status,
            )
            for row in rows
            if row.channel_id in channels
        ]
        return claimed, (rows[-1][0] if len(rows) == limit else None)

    async def put_back(
        self, ids: Collection[uuid.UUID], token: uuid.UUID, due_at: datetime
    ) -> None:
        """Release claimed rows unsent, due again at ``due_at`` (a digest's wait)."""
        if ids:
            await self.session.execute(
                update(Notification)
                .where(Notification.id.in_(list(ids)), Notification.claim_token == token)
                .values(claim_token=None, due_at=due_at)
                .execution_options(synchronize_session=False)
            )

    async def finish(
        self, notification_id: uuid.UUID, token: uuid.UUID, values: dict[str, Any]
    ) -> bool:
        """Move a claimed row on, only for the holder of its claim."""
        result = await self.session.execute(
            update(Notification)
            .where(Notification.id == notification_id, Notification.claim_token == token)
            .values(**values)
            .execution_options(synchronize_session=False)
        )
        return bool(result.rowcount == 1)  # type: ignore[attr-defined]

    async def finish_many(
        self, ids: Collection[uuid.UUID], token: uuid.UUID, values: dict[str, Any]
    ) -> set[uuid.UUID]:
        """Move claimed rows on alike, only those this claim still holds; their ids."""
        result = await self.session.execute(
            update(Notification)
            .where(Notification.id.in_(list(ids)), Notification.claim_token == token)
            .values(**values)
            .returning(Notification.id)
            .execution_options(synchronize_session=False)
        )
        return set(result.scalars().all())

    async def add_attempts(self, attempts: Sequence[dict[str, Any]]) -> None:
        """One multi-row insert, past the ORM's unit of work: a digest's hundred attempts
        are written by one statement."""
        if attempts:
            await self.session.execute(insert(_ATTEMPTS), list(attempts))

    async def next_due_at(self, skip_channels: Collection[uuid.UUID] = ()) -> datetime | None:
        return await self.session.scalar(
            select(Notification.due_at)
            .where(
                Notification.status == "pending",
                *not_among(Notification.channel_id, skip_channels),
            )
            .order_by(Notification.due_at)
            .limit(1)
        )
