"""Every query on routing documents, channels, notifications, attempts and links.

Claims are the callback outbox's (``webhooks/repository.py``): one ``UPDATE ... WHERE id
IN (SELECT ... due ... FOR UPDATE SKIP LOCKED) RETURNING`` statement; on SQLite the
writer holds the database, so the statement is a claim by itself.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple, cast

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
from signoff.models import ApprovalRequest, ApprovalStep, User
from signoff.models.notifications import (
    DecisionLink,
    Notification,
    NotificationAttempt,
    NotificationChannel,
    NotificationPlan,
    RoutingConfig,
)
from signoff.notifications.routing import Member, RequestFacts
from signoff.storage import (
    PLAN_CHANNEL,
    WROTE_NOTIFICATIONS,
    PreparedQuery,
    execute_in,
    not_among,
    queue_write,
    savepoint,
)

NOTIFY_CHANNEL = PLAN_CHANNEL
SCHEDULED_KINDS = ("reminder", "escalated", "expiry_warning")
_ROUTING_RULES = PreparedQuery(
    select(
        RoutingConfig.document.label("document"), RoutingConfig.updated_at.label("updated_at")
    ).where(RoutingConfig.org_id == bindparam("org_id"))
)
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


@dataclass(frozen=True)
class ChannelRef:
    """What the create path needs of a channel: no secrets, nothing decrypted."""

    id: uuid.UUID
    type: str


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
_ATTEMPTS = cast(Table, NotificationAttempt.__table__)


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


@dataclass(frozen=True)
class PlannedRequest:
    facts: RequestFacts
    status: str


class ClaimedNotification(NamedTuple):
    """What a send needs of a claimed notification row."""

    id: uuid.UUID
    request_id: uuid.UUID
    kind: str
    recipient: str
    recipient_user_id: uuid.UUID | None
    require_sign_in: bool
    attempts: int


# Labelled apart from the request's columns (``_FACT_COLUMNS``), which share names.
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


# The columns ``facts_of`` reads, and the request's status, labelled as the entity's
# attributes.
_FACT_COLUMNS = (
    ApprovalRequest.id.label("id"),
    ApprovalRequest.org_id,
    ApprovalRequest.title,
    ApprovalRequest.description,
    ApprovalRequest.priority,
    ApprovalRequest.action_type,
    ApprovalRequest.source,
    ApprovalRequest.metadata_.label("metadata_"),
    ApprovalRequest.has_steps,
    ApprovalRequest.created_at.label("created_at"),
    ApprovalRequest.expires_at,
    ApprovalRequest.number,
    ApprovalRequest.status.label("status"),
)


def facts_of(row: Any) -> RequestFacts:
    """A request's facts from any row with ``ApprovalRequest``'s fields."""
    return RequestFacts(
        id=row.id,
        org_id=row.org_id,
        title=row.title,
        description=row.description,
        priority=row.priority,
        action_type=row.action_type,
        source=row.source,
        metadata=dict(row.metadata_ or {}),
        has_steps=bool(row.has_steps),
        created_at=row.created_at,
        expires_at=row.expires_at,
        number=row.number,
    )


class NotificationRepository:
    def __init__(self, session: AsyncSession, dialect: str) -> None:
        self.session = session
        self.dialect = dialect

    # ---- routing and channels ----

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

    async def active_members(self, org_id: uuid.UUID) -> list[Member]:
        rows = await self.session.execute(
            select(User.id, User.email, User.name, User.role)
            .where(User.org_id == org_id, User.deactivated_at.is_(None))
            .order_by(User.email)
        )
        return [Member(r.id, r.email, r.name, r.role == "admin") for r in rows]

    async def user_in_org(self, org_id: uuid.UUID, user_id: uuid.UUID) -> User | None:
        return await self.session.scalar(
            select(User).where(User.id == user_id, User.org_id == org_id)
        )

    async def find_user_by_email(self, email: str) -> Sequence[User]:
        result = await self.session.scalars(
            select(User).where(User.email == email, User.deactivated_at.is_(None))
        )
        return result.all()

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

    async def requests_to_plan(
        self, request_ids: Collection[uuid.UUID]
    ) -> dict[uuid.UUID, PlannedRequest]:
        """The requests of plans, as they are now (not locked: ``lock_pending``)."""
        rows = await self.session.execute(
            select(*_FACT_COLUMNS).where(ApprovalRequest.id.in_(list(request_ids)))
        )
        return {r.id: PlannedRequest(facts_of(r), r.status) for r in rows}

    async def lock_pending(self, request_ids: Collection[uuid.UUID]) -> set[uuid.UUID]:
        """Those of the requests still pending, share-locked until the planning commits
        (PostgreSQL): a decision on one waits for the rows planned for it to be written.
        One that takes the request's lock then cancels its reminders; one without a lock
        (one statement: ``approvals.service._without_lock``) cancels what its statement's
        snapshot, taken before it waited, shows, which is not these: the sender voids
        them when it claims them (``sender._split_decided``). A decision that came first
        is seen here, and nothing is planned for it. (On SQLite the planning holds the
        writer.)"""
        rows = await self.session.execute(
            select(ApprovalRequest.id)
            .where(ApprovalRequest.id.in_(list(request_ids)), ApprovalRequest.status == "pending")
            .with_for_update(read=True)
        )
        return set(rows.scalars())

    async def pending_step_approvers(
        self, request_ids: Collection[uuid.UUID]
    ) -> set[tuple[uuid.UUID, uuid.UUID]]:
        """(request, approver) of every step still waiting for its approver."""
        if not request_ids:
            return set()
        rows = await self.session.execute(
            select(ApprovalStep.request_id, ApprovalStep.approver_id).where(
                ApprovalStep.request_id.in_(list(request_ids)), ApprovalStep.status == "pending"
            )
        )
        return {(r.request_id, r.approver_id) for r in rows}

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
            select(*_CLAIMED_COLUMNS, Notification.channel_id, *_FACT_COLUMNS)
            .join(ApprovalRequest, ApprovalRequest.id == Notification.request_id)
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

    async def list_for_request(self, request_id: uuid.UUID) -> Sequence[Notification]:
        """A request's notifications, each with its channel as it was when planned (the
        channel may have been renamed or removed since)."""
        rows = await self.session.scalars(
            select(Notification)
            .where(Notification.request_id == request_id)
            .order_by(Notification.due_at, Notification.created_at)
        )
        return rows.all()

    # ---- one-click links ----

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

    async def org_of_request(self, request_id: uuid.UUID) -> uuid.UUID | None:
        return await self.session.scalar(
            select(ApprovalRequest.org_id).where(ApprovalRequest.id == request_id)
        )

    async def request_facts(
        self, org_id: uuid.UUID, request_id: uuid.UUID
    ) -> tuple[RequestFacts, Any] | None:
        row = await self.session.scalar(
            select(ApprovalRequest).where(
                ApprovalRequest.id == request_id, ApprovalRequest.org_id == org_id
            )
        )
        return None if row is None else (facts_of(row), row)
