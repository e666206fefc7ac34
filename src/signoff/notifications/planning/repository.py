"""Every query on the plan rows changes write, and on the notification rows planning makes
of them (the outbox the sender claims from: ``sending/repository.py``)."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from sqlalchemy import (
    ColumnElement,
    Table,
    bindparam,
    delete,
    exists,
    insert,
    literal,
    null,
    select,
    text,
    update,
)
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.sql.dml import Insert

from signoff.common.ids import new_id
from signoff.models.notifications import Notification, NotificationChannel, NotificationPlan
from signoff.storage import (
    PLAN_CHANNEL,
    WROTE_NOTIFICATIONS,
    PreparedQuery,
    not_among,
    queue_write,
    savepoint,
)

# The channel the plan rows' trigger notifies on (storage names it for the listener).
NOTIFY_CHANNEL = PLAN_CHANNEL
SCHEDULED_KINDS = ("reminder", "escalated", "expiry_warning")
_NOTIFICATIONS: Table = Notification.__table__  # type: ignore[assignment]
_CANCEL_SCHEDULED = PreparedQuery(
    update(_NOTIFICATIONS)
    .where(
        _NOTIFICATIONS.c.request_id == bindparam("request_id"),
        _NOTIFICATIONS.c.status == "pending",
        # One parameter each (a prepared statement takes no expanding list).
        _NOTIFICATIONS.c.kind.in_([literal(kind) for kind in SCHEDULED_KINDS]),
    )
    .values(status="cancelled", updated_at=bindparam("now"), last_error="request decided")
)


_NOTIFICATIONS = cast(Table, Notification.__table__)
_PLANS = cast(Table, NotificationPlan.__table__)
_CHANNELS = cast(Table, NotificationChannel.__table__)
_PLAN_COLUMNS = ("id", "request_id", "kind", "approver_ids", "created_at")


def can_notify(org_id: Any) -> ColumnElement[bool]:
    """Whether the org ``org_id`` (a column or a parameter) has a channel: the condition
    under which a change writes its plan row, decided by the writing statement itself.

    Only a rule sends, and a rule names at least one channel of its own document (PUT
    refuses any other), so an org without a channel has nothing that can send: planning
    its changes would read its routing, find no rule and delete the plan. Most orgs have
    no routing at all. Channels rather than the rules: the unique (org_id, name) index
    answers it without reading the routing document (an org with channels and no rules
    still writes plans, which are planned to nothing, as before). Asked in the statement,
    not from a process's memory, so every replica agrees with the routing as committed."""
    return exists().where(_CHANNELS.c.org_id == org_id)


def _plan_insert(org_id: Any, *values: Any) -> Insert:
    """The insert of one plan row of ``values`` (in ``_PLAN_COLUMNS``' order), made only
    where ``can_notify(org_id)``."""
    return insert(_PLANS).from_select(
        list(_PLAN_COLUMNS), select(*values).where(can_notify(org_id))
    )


def _param(name: str, column: str) -> Any:
    return bindparam(name, type_=_PLANS.c[column].type)


_INSERT_PLAN = PreparedQuery(
    _plan_insert(
        bindparam("org_id", type_=_CHANNELS.c.org_id.type),
        *(_param(column, column) for column in _PLAN_COLUMNS),
    )
)


def created_plan_from(created: Any) -> Insert:
    """The "created" plan row (``add_plan``) of the request a statement creates, as a part
    of that statement, written only where its org ``can_notify``: ``created`` is its
    ``RETURNING id, org_id`` (PostgreSQL's one-statement create,
    ``approvals/repository.py``). Parameters ``plan_id`` and ``plan_created_at``; the
    caller marks the session (``plans_written``) if a row was written."""
    return _plan_insert(
        created.c.org_id,
        _param("plan_id", "id"),
        created.c.id,
        literal("created", _PLANS.c.kind.type),
        null(),
        _param("plan_created_at", "created_at"),
    )


def plans_written(session: AsyncSession) -> None:
    """The transaction wrote plan rows: the sender is woken once it commits."""
    session.info[WROTE_NOTIFICATIONS] = True


@dataclass(frozen=True)
class WaitingPlan:
    """A change whose notifications a worker has yet to plan."""

    id: uuid.UUID
    request_id: uuid.UUID
    kind: str
    approver_ids: tuple[uuid.UUID, ...]
    created_at: datetime


class PlanQueries:
    """Plans and the notification rows made of them (``NotificationRepository`` is one)."""

    session: AsyncSession
    dialect: str

    # ---- plans (written by a change, planned by a worker) ----

    async def add_plan(
        self,
        org_id: uuid.UUID,
        request_id: uuid.UUID,
        kind: str,
        now: datetime,
        approver_ids: Sequence[uuid.UUID] | None = None,
    ) -> None:
        """The change's one write for its notifications, made only where the org
        ``can_notify``; a worker plans them. Queued (``queue_write``): on PostgreSQL it
        goes out with the change's other writes. The session is marked
        ``WROTE_NOTIFICATIONS`` (the sender is woken after the commit) only if the row
        was written, which the statement's row count says: no further round trip."""
        row = {
            "org_id": org_id,
            "id": new_id(),
            "request_id": request_id,
            "kind": kind,
            "approver_ids": None if approver_ids is None else [str(a) for a in approver_ids],
            "created_at": now,
        }
        await queue_write(self.session, _INSERT_PLAN, row, marks=WROTE_NOTIFICATIONS)

    async def take_plans(self, limit: int, skip: Collection[uuid.UUID] = ()) -> list[WaitingPlan]:
        """The oldest waiting plans, locked by this transaction (PostgreSQL: others skip
        them; SQLite: the writer holds the database). ``skip``: plans parked after failing
        (common/poison.py)."""
        # Plain columns, not entities: on SQLite this runs on the event loop, holding the
        # writer, while the API's creates wait behind it.
        rows = await self.session.execute(
            select(
                NotificationPlan.id,
                NotificationPlan.request_id,
                NotificationPlan.kind,
                NotificationPlan.approver_ids,
                NotificationPlan.created_at,
            )
            .where(*not_among(NotificationPlan.id, skip))
            .order_by(NotificationPlan.id)
            .limit(limit)
            .with_for_update(skip_locked=True)
        )
        return [
            WaitingPlan(
                p.id,
                p.request_id,
                p.kind,
                tuple(uuid.UUID(a) for a in p.approver_ids or ()),
                p.created_at,
            )
            for p in rows
        ]

    async def delete_plans(self, ids: Collection[uuid.UUID]) -> None:
        await self.session.execute(
            delete(NotificationPlan)
            .where(NotificationPlan.id.in_(list(ids)))
            .execution_options(synchronize_session=False)
        )

    async def any_plan_waiting(self, skip: Collection[uuid.UUID] = ()) -> bool:
        first = select(NotificationPlan.id).where(*not_among(NotificationPlan.id, skip))
        return (await self.session.scalar(first.limit(1))) is not None

    def savepoint(self) -> contextlib.AbstractAsyncContextManager[None]:
        """A savepoint: what a block writes inside it is undone alone if the block raises."""
        return savepoint(self.session)

    # ---- the outbox ----

    async def insert_notifications(self, rows: Sequence[dict[str, Any]]) -> None:
        """One multi-row insert, past the ORM's unit of work (nothing tracks these)."""
        await self.session.execute(insert(_NOTIFICATIONS), list(rows))
        self.session.info[WROTE_NOTIFICATIONS] = True

    async def notify_workers(self) -> None:
        """PostgreSQL: wake every listening sender when this transaction commits."""
        if self.dialect == "postgresql":
            await self.session.execute(text(f"NOTIFY {NOTIFY_CHANNEL}"))

    async def cancel_scheduled(self, request_ids: Collection[uuid.UUID], now: datetime) -> None:
        """The requests left pending: their reminders, escalations and warnings are void.

        Every decision runs it for its one request, so that form is prepared and goes out
        with the decision's other writes (``queue_write``); the expiry sweep's batches use
        one statement for all their requests."""
        ids = list(request_ids)
        if len(ids) == 1:
            await queue_write(self.session, _CANCEL_SCHEDULED, {"request_id": ids[0], "now": now})
            return
        await self.session.execute(
            update(Notification)
            .where(
                Notification.request_id.in_(ids),
                Notification.status == "pending",
                Notification.kind.in_(SCHEDULED_KINDS),
            )
            .values(status="cancelled", updated_at=now, last_error="request decided")
            .execution_options(synchronize_session=False)
        )

    async def list_for_request(self, request_id: uuid.UUID) -> Sequence[Notification]:
        """A request's notifications, each with its channel as it was when planned (the
        channel may have been renamed or removed since)."""
        rows = await self.session.scalars(
            select(Notification)
            .where(Notification.request_id == request_id)
            .order_by(Notification.due_at, Notification.created_at)
        )
        return rows.all()
