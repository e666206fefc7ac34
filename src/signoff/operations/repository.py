"""The queries behind ``/metrics`` and ``/readyz``: each one indexed and small, since a
scraper or a load balancer runs them every few seconds."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import func, select, text
from sqlalchemy.ext.asyncio import AsyncSession

from signoff.models import ApprovalRequest, WebhookDelivery


class OperationsRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def ping(self) -> None:
        await self.session.execute(text("SELECT 1"))

    async def schema_revisions(self) -> frozenset[str]:
        """The migration revisions the database is at (Alembic's own table)."""
        rows = await self.session.execute(text("SELECT version_num FROM alembic_version"))
        return frozenset(str(row[0]) for row in rows)

    async def delivery_queue(self, now: datetime) -> tuple[int, int]:
        """Pending deliveries, and how many of them are due (waiting for a worker).

        Both read the partial index of pending deliveries by due time.
        """
        pending = WebhookDelivery.status == "pending"
        total = await self.session.scalar(select(func.count()).where(pending))
        due = await self.session.scalar(
            select(func.count()).where(pending, WebhookDelivery.due_at <= now)
        )
        return int(total or 0), int(due or 0)

    async def oldest_overdue_expiry(self, now: datetime) -> datetime | None:
        """The deadline of the pending request longest past it: how far behind the expiry
        sweep is (the partial index of pending requests with a deadline)."""
        value: datetime | None = await self.session.scalar(
            select(func.min(ApprovalRequest.expires_at)).where(
                ApprovalRequest.status == "pending",
                ApprovalRequest.expires_at.is_not(None),
                ApprovalRequest.expires_at <= now,
            )
        )
        return value
