"""Every query on deliveries and their attempts.

Claims are one statement on both databases: ``UPDATE ... WHERE id IN (SELECT ... due ...
LIMIT n) RETURNING``. On PostgreSQL the inner select carries ``FOR UPDATE SKIP LOCKED``,
so concurrent workers take disjoint rows without waiting on each other; on SQLite the
writer holds the database (``BEGIN IMMEDIATE``), so the statement is a claim by itself.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple, cast

from sqlalchemy import Table, func, insert, select, text, update
from sqlalchemy.ext.asyncio import AsyncSession

from signoff.models import AuditEvent, Connection
from signoff.models.webhooks import WebhookAttempt, WebhookDelivery

NOTIFY_CHANNEL = "signoff_deliveries"
# A claim looks at this many due rows per free slot, to fill slots past busy receivers.
CANDIDATES_PER_SLOT = 2
# Pending deliveries ``next_due_at`` looks at, at most, past excluded receivers.
NEXT_DUE_LOOKAHEAD = 256
# Core tables for the record's bulk inserts (no unit of work for rows nobody tracks).
_ATTEMPTS = cast(Table, WebhookAttempt.__table__)
_EVENTS = cast(Table, AuditEvent.__table__)
_DELIVERIES = cast(Table, WebhookDelivery.__table__)


class ClaimedRow(NamedTuple):
    """What an attempt of a claimed delivery needs from its row."""

    id: uuid.UUID
    org_id: uuid.UUID
    request_id: uuid.UUID
    url: str
    target: str
    body: bytes
    headers_encrypted: str | None
    attempts: int
    request_id_header: str | None
    receipt_encrypted: str | None


CLAIMED_COLUMNS = ClaimedRow._fields


@dataclass(frozen=True)
class ConnectionSecrets:
    current_encrypted: str
    previous_encrypted: str | None
    previous_expires_at: datetime | None


class WebhookRepository:
    def __init__(self, session: AsyncSession, dialect: str) -> None:
        self.session = session
        self.dialect = dialect

    # ---- the outbox ----

    async def add_deliveries(self, deliveries: Sequence[dict[str, Any]]) -> None:
        """New deliveries (their column values) in one statement, past the session's unit
        of work (nothing reads them back in this transaction: the outbox holds what
        attempts need)."""
        if deliveries:
            await self.session.execute(insert(_DELIVERIES), list(deliveries))

    async def connection_secrets(self, connection_id: uuid.UUID) -> ConnectionSecrets | None:
        row = (
            await self.session.execute(
                select(
                    Connection.webhook_secret_encrypted,
                    Connection.previous_webhook_secret_encrypted,
                    Connection.previous_webhook_secret_expires_at,
                ).where(Connection.id == connection_id)
            )
        ).first()
        return None if row is None else ConnectionSecrets(row[0], row[1], row[2])

    async def claim_due(
        self,
        token: uuid.UUID,
        now: datetime,
        lease_until: datetime,
        limit: int,
        in_flight: Mapping[str, int],
        cap: Callable[[str], int],
        held: Collection[str] = (),
    ) -> Sequence[uuid.UUID]:
        """Take up to ``limit`` due deliveries for ``token`` until ``lease_until``.

        No receiver (``target``) gets more than ``cap(target)`` attempts of this worker at
        once, counting the ``in_flight`` ones: receivers already at their cap are left out
        of the query altogether, so a backlog for one slow receiver never stands in front
        of due deliveries to the others.

        Receivers ``held`` after a failure (receivers.py) come after the others: their
        deliveries are claimed only when no other delivery is due beyond those claimed
        (a second query). At saturation, attempts likely to fail then take no turns from
        receivers that answer; below it, they go out on their schedule.
        """
        saturated = [target for target, count in in_flight.items() if count >= cap(target)]
        counts = Counter(in_flight)
        waiting = [target for target in held if target not in saturated]
        rows = await self._candidates(now, limit, [*saturated, *waiting])
        chosen = _choose(rows, limit, counts, cap)
        # Room for held receivers only once nothing else is due: a full window of
        # candidates may leave slots empty (receivers at their cap) with more behind it.
        others_exhausted = len(rows) < limit * CANDIDATES_PER_SLOT
        if waiting and others_exhausted and len(chosen) < limit:
            rows = await self._candidates(now, limit, saturated, only=waiting, besides=chosen)
            chosen += _choose(rows, limit - len(chosen), counts, cap)
        if not chosen:
            return []
        # The candidates are ours until commit (row locks on PostgreSQL, the write lock
        # on SQLite); only the chosen ones are claimed, the rest stay free for others.
        result = await self.session.execute(
            update(WebhookDelivery)
            .where(WebhookDelivery.id.in_(chosen))
            .values(claim_token=token, due_at=lease_until, updated_at=now)
            .returning(WebhookDelivery.id)
            .execution_options(synchronize_session=False)
        )
        return list(result.scalars().all())

    async def _candidates(
        self,
        now: datetime,
        limit: int,
        excluded: Collection[str],
        *,
        only: Collection[str] = (),
        besides: Collection[uuid.UUID] = (),
    ) -> Sequence[Any]:
        """Due deliveries, oldest first, locked for us on PostgreSQL: none to ``excluded``
        receivers, only those to ``only`` receivers if given, and none of ``besides``."""
        due = WebhookDelivery.due_at
        query = (
            select(WebhookDelivery.id, WebhookDelivery.target)
            .where(WebhookDelivery.status == "pending", due <= now)
            .order_by(due)
            .limit(limit * CANDIDATES_PER_SLOT)
            .with_for_update(skip_locked=True)
        )
        if excluded:
            query = query.where(WebhookDelivery.target.not_in(excluded))
        if only:
            query = query.where(WebhookDelivery.target.in_(only))
        if besides:
            query = query.where(WebhookDelivery.id.not_in(besides))
        return (await self.session.execute(query)).all()

    async def claim_for_manual_retry(
        self,
        org_id: uuid.UUID,
        delivery_id: uuid.UUID,
        token: uuid.UUID,
        now: datetime,
        lease_until: datetime,
    ) -> bool:
        """Take a finished (succeeded or failed) delivery for one more attempt.

        A delivery still on its automatic schedule is not taken, nor one that another
        manual retry holds (unless that holder's lease has run out).
        """
        result = await self.session.execute(
            update(WebhookDelivery)
            .where(
                WebhookDelivery.id == delivery_id,
                WebhookDelivery.org_id == org_id,
                WebhookDelivery.status.in_(("succeeded", "failed")),
                (WebhookDelivery.claim_token.is_(None)) | (WebhookDelivery.due_at <= now),
            )
            .values(claim_token=token, due_at=lease_until, updated_at=now)
            .execution_options(synchronize_session=False)
        )
        return bool(result.rowcount == 1)  # type: ignore[attr-defined]

    async def get_claimed(
        self, ids: Collection[uuid.UUID], token: uuid.UUID
    ) -> Sequence[tuple[ClaimedRow, ConnectionSecrets]]:
        """Claimed deliveries with what signing them needs, in one query (columns, not
        ORM objects: a worker reads hundreds a second)."""
        if not ids:
            return []
        rows = await self.session.execute(
            select(
                *(getattr(WebhookDelivery, column) for column in CLAIMED_COLUMNS),
                Connection.webhook_secret_encrypted,
                Connection.previous_webhook_secret_encrypted,
                Connection.previous_webhook_secret_expires_at,
            )
            .join(Connection, Connection.id == WebhookDelivery.connection_id)
            .where(WebhookDelivery.id.in_(list(ids)), WebhookDelivery.claim_token == token)
        )
        width = len(CLAIMED_COLUMNS)
        return [(ClaimedRow(*row[:width]), ConnectionSecrets(*row[width:])) for row in rows]

    async def get_delivery(
        self, org_id: uuid.UUID, delivery_id: uuid.UUID
    ) -> WebhookDelivery | None:
        return await self.session.scalar(
            select(WebhookDelivery).where(
                WebhookDelivery.id == delivery_id, WebhookDelivery.org_id == org_id
            )
        )

    async def finish_attempt(
        self,
        delivery_id: uuid.UUID,
        token: uuid.UUID,
        values: dict[str, Any],
    ) -> int | None:
        """Record an attempt's effect on the delivery, only for the holder of its claim.

        Returns the attempt's number (the new ``attempts``), or None if the claim was lost
        (its lease ran out and another worker took the delivery over).
        """
        result = await self.session.execute(
            update(WebhookDelivery)
            .where(WebhookDelivery.id == delivery_id, WebhookDelivery.claim_token == token)
            .values(attempts=WebhookDelivery.attempts + 1, claim_token=None, **values)
            .returning(WebhookDelivery.attempts)
            .execution_options(synchronize_session=False)
        )
        return result.scalar_one_or_none()

    async def finish_attempts(
        self, delivery_ids: Collection[uuid.UUID], token: uuid.UUID, values: dict[str, Any]
    ) -> dict[uuid.UUID, int]:
        """``finish_attempt`` for deliveries of one claim that end the same way, in one
        statement. Answers the new ``attempts`` of each delivery still held; a delivery
        whose claim was lost is left out of the answer."""
        if not delivery_ids:
            return {}
        result = await self.session.execute(
            update(WebhookDelivery)
            .where(WebhookDelivery.id.in_(list(delivery_ids)), WebhookDelivery.claim_token == token)
            .values(attempts=WebhookDelivery.attempts + 1, claim_token=None, **values)
            .returning(WebhookDelivery.id, WebhookDelivery.attempts)
            .execution_options(synchronize_session=False)
        )
        return {row[0]: row[1] for row in result.all()}

    async def release(self, ids: Collection[uuid.UUID], token: uuid.UUID, now: datetime) -> int:
        """Give claimed deliveries back, due at once, for any worker to take."""
        if not ids:
            return 0
        result = await self.session.execute(
            update(WebhookDelivery)
            .where(WebhookDelivery.id.in_(list(ids)), WebhookDelivery.claim_token == token)
            .values(claim_token=None, due_at=now, updated_at=now)
            .execution_options(synchronize_session=False)
        )
        return int(result.rowcount)  # type: ignore[attr-defined]

    async def next_due_at(self, exclude_targets: Collection[str] = ()) -> datetime | None:
        """When the next pending delivery falls due (or the next lease runs out), among
        those to receivers other than ``exclude_targets``.

        Only the first ``NEXT_DUE_LOOKAHEAD`` pending deliveries are looked at: behind a
        backlog for excluded receivers (one receiver's 100,000 expiry callbacks), the
        answer is None rather than a walk through the whole backlog, once per claim.
        """
        statement = select(func.min(WebhookDelivery.due_at)).where(
            WebhookDelivery.status == "pending"
        )
        if not exclude_targets:
            value: datetime | None = await self.session.scalar(statement)
            return value
        rows = await self.session.execute(
            select(WebhookDelivery.due_at, WebhookDelivery.target)
            .where(WebhookDelivery.status == "pending")
            .order_by(WebhookDelivery.due_at)
            .limit(NEXT_DUE_LOOKAHEAD)
        )
        excluded = set(exclude_targets)
        return next((due for due, target in rows if target not in excluded), None)

    async def plan_in_due_order(self) -> None:
        """PostgreSQL: plan this transaction's due-order queries (the claim's candidates,
        the next due time) as a walk of the pending index in due order, stopped at the
        limit. A queue's statistics always lag (due times move past the histogram, and a
        burst of deliveries outgrows the last ANALYZE): the planner then reckons a few
        hundred rows due and reads and sorts every pending one instead, on every claim
        of an expiry storm (docs/decisions/0021-expiry-storms-and-the-callback-worker.md)."""
        if self.dialect == "postgresql":
            await self.session.execute(
                text(
                    "SELECT set_config('enable_bitmapscan', 'off', true),"
                    " set_config('enable_sort', 'off', true)"
                )
            )

    async def notify_workers(self) -> None:
        """PostgreSQL: wake every listening worker when this transaction commits."""
        if self.dialect == "postgresql":
            await self.session.execute(text(f"NOTIFY {NOTIFY_CHANNEL}"))

    # ---- attempts ----

    async def add_attempt(self, attempt: WebhookAttempt) -> None:
        self.session.add(attempt)

    async def add_event(self, event: AuditEvent) -> None:
        self.session.add(event)

    async def insert_attempts(self, attempts: Sequence[dict[str, Any]]) -> None:
        """Write log entries (their column values) in one statement, past the session's
        unit of work (nothing in this transaction reads them back)."""
        if attempts:
            await self.session.execute(insert(_ATTEMPTS), list(attempts))

    async def insert_events(self, events: Sequence[dict[str, Any]]) -> None:
        if events:
            await self.session.execute(insert(_EVENTS), list(events))

    async def list_attempts(
        self, org_id: uuid.UUID, request_id: uuid.UUID | None, limit: int
    ) -> Sequence[WebhookAttempt]:
        statement = select(WebhookAttempt).where(WebhookAttempt.org_id == org_id)
        if request_id is not None:
            statement = statement.where(WebhookAttempt.request_id == request_id)
        statement = statement.order_by(
            WebhookAttempt.created_at.desc(), WebhookAttempt.id.desc()
        ).limit(limit)
        return (await self.session.scalars(statement)).all()

    async def list_deliveries(self, request_id: uuid.UUID) -> Sequence[WebhookDelivery]:
        result = await self.session.scalars(
            select(WebhookDelivery)
            .where(WebhookDelivery.request_id == request_id)
            .order_by(WebhookDelivery.created_at, WebhookDelivery.id)
        )
        return result.all()

    async def flush(self) -> None:
        await self.session.flush()


def _choose(
    rows: Sequence[Any], limit: int, counts: Counter[str], cap: Callable[[str], int]
) -> list[uuid.UUID]:
    """Up to ``limit`` of ``rows`` in their order, at most ``cap(target)`` per receiver
    counting ``counts`` (which this updates)."""
    chosen: list[uuid.UUID] = []
    for row in rows:
        if counts[row.target] >= cap(row.target):
            continue
        counts[row.target] += 1
        chosen.append(row.id)
        if len(chosen) == limit:
            break
    return chosen
