"""The admin pages' own queries: the org-wide audit and delivery logs.

Both run on an index that starts with the org and its time (migration 0012), read one
row more than a page to know whether a next page exists, and never count the whole log.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from signoff.models import ApprovalRequest, AuditEvent, WebhookAttempt, WebhookDelivery

MAX_AUDIT_TYPES = 100


@dataclass(frozen=True)
class AuditFilters:
    type: str | None = None
    request_id: uuid.UUID | None = None
    # The request by its number in the org (``#12``), as people name it.
    request_number: int | None = None
    actor_id: uuid.UUID | None = None
    since: datetime | None = None
    until: datetime | None = None


@dataclass(frozen=True)
class DeliveryFilters:
    request_id: uuid.UUID | None = None
    status: str | None = None
    connection_id: uuid.UUID | None = None


@dataclass(frozen=True)
class AuditRow:
    """An event of the audit log, with the title and number of its request."""

    event: AuditEvent
    request_title: str | None
    request_number: int | None


@dataclass(frozen=True)
class DeliveryRow:
    delivery: WebhookDelivery
    request_title: str


class AdminRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def has_requests(self, org_id: uuid.UUID) -> bool:
        """Whether the org has ever had a request (one row read, on the org's index)."""
        found = await self.session.scalar(
            select(ApprovalRequest.id).where(ApprovalRequest.org_id == org_id).limit(1)
        )
        return found is not None

    async def list_audit(
        self, org_id: uuid.UUID, filters: AuditFilters, offset: int, limit: int
    ) -> list[AuditRow]:
        """A page of the org's events, newest first, each with its request's title and
        number (read by primary key for the page's rows only)."""
        statement = (
            select(AuditEvent, ApprovalRequest.title, ApprovalRequest.number)
            .outerjoin(ApprovalRequest, ApprovalRequest.id == AuditEvent.request_id)
            .where(AuditEvent.org_id == org_id)
        )
        if filters.type:
            statement = statement.where(AuditEvent.type == filters.type)
        if filters.request_id:
            statement = statement.where(AuditEvent.request_id == filters.request_id)
        if filters.request_number is not None:
            numbered = select(ApprovalRequest.id).where(
                ApprovalRequest.org_id == org_id, ApprovalRequest.number == filters.request_number
            )
            statement = statement.where(AuditEvent.request_id == numbered.scalar_subquery())
        if filters.actor_id:
            statement = statement.where(AuditEvent.actor_id == filters.actor_id)
        if filters.since:
            statement = statement.where(AuditEvent.created_at >= filters.since)
        if filters.until:
            statement = statement.where(AuditEvent.created_at < filters.until)
        statement = (
            statement.order_by(AuditEvent.created_at.desc(), AuditEvent.id.desc())
            .offset(offset)
            .limit(limit)
        )
        rows = await self.session.execute(statement)
        return [AuditRow(event, title, number) for event, title, number in rows]

    async def audit_types(self, org_id: uuid.UUID) -> Sequence[str]:
        """The event types the org's log holds (the type filter's choices), at most
        ``MAX_AUDIT_TYPES``: found by seeking from one type to the next in the index on
        (org, type) (migration 0014), one step per type, where a ``DISTINCT`` read every
        event of the org."""
        first = select(func.min(AuditEvent.type).label("type")).where(AuditEvent.org_id == org_id)
        found = first.cte("types", recursive=True)
        following = (
            select(func.min(AuditEvent.type))
            .where(AuditEvent.org_id == org_id, AuditEvent.type > found.c.type)
            .scalar_subquery()
        )
        found = found.union_all(select(following).where(found.c.type.is_not(None)))
        result = await self.session.scalars(
            select(found.c.type).where(found.c.type.is_not(None)).limit(MAX_AUDIT_TYPES)
        )
        return list(result.all())

    async def list_deliveries(
        self, org_id: uuid.UUID, filters: DeliveryFilters, offset: int, limit: int
    ) -> Sequence[DeliveryRow]:
        statement = (
            select(WebhookDelivery, ApprovalRequest.title)
            .join(ApprovalRequest, ApprovalRequest.id == WebhookDelivery.request_id)
            .where(WebhookDelivery.org_id == org_id)
        )
        if filters.request_id:
            statement = statement.where(WebhookDelivery.request_id == filters.request_id)
        if filters.status:
            statement = statement.where(WebhookDelivery.status == filters.status)
        if filters.connection_id:
            statement = statement.where(WebhookDelivery.connection_id == filters.connection_id)
        statement = (
            statement.order_by(WebhookDelivery.created_at.desc(), WebhookDelivery.id.desc())
            .offset(offset)
            .limit(limit)
        )
        rows = (await self.session.execute(statement)).all()
        return [DeliveryRow(row[0], row[1]) for row in rows]

    async def get_delivery(self, org_id: uuid.UUID, delivery_id: uuid.UUID) -> DeliveryRow | None:
        row = (
            await self.session.execute(
                select(WebhookDelivery, ApprovalRequest.title)
                .join(ApprovalRequest, ApprovalRequest.id == WebhookDelivery.request_id)
                .where(WebhookDelivery.org_id == org_id, WebhookDelivery.id == delivery_id)
            )
        ).first()
        return DeliveryRow(row[0], row[1]) if row is not None else None

    async def attempts_of(self, delivery_id: uuid.UUID) -> Sequence[WebhookAttempt]:
        result = await self.session.scalars(
            select(WebhookAttempt)
            .where(WebhookAttempt.delivery_id == delivery_id)
            .order_by(WebhookAttempt.attempt.desc())
        )
        return result.all()
