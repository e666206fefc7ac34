"""The queries of a purge: pick one batch of old finished requests, delete it whole.

A request goes with its votes, steps, comments, audit events, deliveries and delivery
attempts. The children are deleted explicitly, before the requests, rather than left to
``ON DELETE CASCADE``: the statements then say what they remove, and the counts they
return are what ``signoff purge`` reports. The search index follows the requests by the
triggers of the migrations (SQLite) or by being a column of the row (PostgreSQL).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import cast

from sqlalchemy import Table, delete, exists, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from signoff.models import (
    ApprovalRequest,
    ApprovalStep,
    AuditEvent,
    Comment,
    Organization,
    Receipt,
    Vote,
    WebhookAttempt,
    WebhookDelivery,
)

FINISHED_STATUSES = ("approved", "rejected", "cancelled", "expired")

# Children first: each references the request (and attempts reference deliveries).
_CHILDREN: Sequence[tuple[str, Table]] = tuple(
    (kind, cast(Table, model.__table__))
    for kind, model in (
        ("delivery_attempts", WebhookAttempt),
        ("deliveries", WebhookDelivery),
        ("votes", Vote),
        ("steps", ApprovalStep),
        ("comments", Comment),
        ("events", AuditEvent),
        ("receipts", Receipt),
    )
)
_REQUESTS = cast(Table, ApprovalRequest.__table__)


class RetentionRepository:
    def __init__(self, session: AsyncSession, dialect: str) -> None:
        self.session = session
        self.dialect = dialect

    async def org_ids(self) -> list[uuid.UUID]:
        return list((await self.session.scalars(select(Organization.id))).all())

    async def purgeable_ids(
        self, org_id: uuid.UUID, before: datetime, limit: int
    ) -> list[uuid.UUID]:
        """Up to ``limit`` finished requests of the org decided before ``before``, oldest
        first (the org's index by decision time), none with a callback still pending:
        a delivery on its retry schedule is finished before its request may go.

        Locked for this transaction on PostgreSQL; SKIP LOCKED, so a purge never waits
        on a row another transaction holds (it takes that row in a later run).
        """
        pending_delivery = exists().where(
            WebhookDelivery.request_id == ApprovalRequest.id,
            WebhookDelivery.status == "pending",
        )
        statement = (
            select(ApprovalRequest.id)
            .where(
                ApprovalRequest.org_id == org_id,
                ApprovalRequest.decided_at < before,
                ApprovalRequest.status.in_(FINISHED_STATUSES),
                ~pending_delivery,
            )
            .order_by(ApprovalRequest.decided_at)
            .limit(limit)
        )
        if self.dialect == "postgresql":
            statement = statement.with_for_update(skip_locked=True, of=ApprovalRequest)
        return list((await self.session.scalars(statement)).all())

    async def count_purgeable(self, org_id: uuid.UUID, before: datetime) -> int:
        """How many requests a purge would delete now (``--dry-run``)."""
        pending_delivery = exists().where(
            WebhookDelivery.request_id == ApprovalRequest.id,
            WebhookDelivery.status == "pending",
        )
        count = await self.session.scalar(
            select(func.count()).where(
                ApprovalRequest.org_id == org_id,
                ApprovalRequest.decided_at < before,
                ApprovalRequest.status.in_(FINISHED_STATUSES),
                ~pending_delivery,
            )
        )
        return int(count or 0)

    async def delete_requests(self, ids: Sequence[uuid.UUID]) -> dict[str, int]:
        """Delete the requests and everything recorded about them; rows deleted by kind."""
        deleted: dict[str, int] = {}
        id_list = list(ids)
        for kind, table in (*_CHILDREN, ("requests", _REQUESTS)):
            column = table.c.id if table is _REQUESTS else table.c.request_id
            result = await self.session.execute(delete(table).where(column.in_(id_list)))
            deleted[kind] = int(result.rowcount)  # type: ignore[attr-defined]
        return deleted
