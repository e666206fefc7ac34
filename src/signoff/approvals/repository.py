"""Every query on approval requests, votes, comments and audit events."""

from __future__ import annotations

import contextlib
import functools
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from sqlalchemy import (
    Integer,
    Row,
    Select,
    String,
    Table,
    Uuid,
    bindparam,
    column,
    delete,
    exists,
    false,
    func,
    insert,
    literal_column,
    or_,
    select,
    table,
    true,
    update,
)
from sqlalchemy.dialects import postgresql
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.sql.dml import Insert

from signoff.approvals.state import UnreadDecision
from signoff.approvals.typed_rows import (
    COLUMNS,
    RequestRecord,
    StepRecord,
    VoteRecord,
    columns_of,
    request_columns,
)
from signoff.auth.principal import PrincipalCheck
from signoff.common.ids import new_id
from signoff.common.time import utcnow
from signoff.models import (
    ApprovalRequest,
    ApprovalStep,
    AuditEvent,
    Comment,
    Connection,
    Group,
    GroupMember,
    User,
    Vote,
)
from signoff.orgs.repository import principal_guard, principal_guard_params, stood_in_for
from signoff.policies.standing_repository import take_use
from signoff.storage import (
    PreparedQuery,
    QueryRunner,
    count_in,
    execute_alone,
    execute_in,
    has_unflushed_changes,
    insert_ignoring_conflicts,
    may_write_alone,
    not_among,
    queue_write,
    savepoint,
    send_queued_writes,
    writes_alone,
)

# The reads of every get and decide: built once, since building a statement (and its cache
# key) costs more than SQLite takes to answer it (``make bench``, scenarios get and
# decide). Each answers ``RequestRecord``s, built straight from the rows.
_REQUEST_FOR_UPDATE = PreparedQuery(
    select(*request_columns())
    .where(
        ApprovalRequest.id == bindparam("request_id"),
        ApprovalRequest.org_id == bindparam("org_id"),
    )
    .with_for_update(),
    row_type=RequestRecord,
)
# The same, with the principal's guard (``orgs.repository.principal_guard``) as a last
# column, ``principal_live``: the first statement of a decision whose principal came from
# memory (PostgreSQL).
_REQUEST_FOR_UPDATE_GUARDED = PreparedQuery(
    select(*request_columns(), principal_guard().label("principal_live"))
    .where(
        ApprovalRequest.id == bindparam("request_id"),
        ApprovalRequest.org_id == bindparam("org_id"),
    )
    .with_for_update(of=ApprovalRequest)
)
_REQUEST_BY_KEY = PreparedQuery(
    select(*request_columns()).where(
        ApprovalRequest.org_id == bindparam("org_id"),
        ApprovalRequest.idempotency_key == bindparam("key"),
    ),
    row_type=RequestRecord,
)


def _unless_key_taken(dialect: str) -> Insert:
    """A request's insert that writes nothing if its idempotency key is taken in the org.
    SQLite's unique index holds keyed requests only (migration 0057), so the conflict
    target names its condition; PostgreSQL's index holds every request."""
    table: Table = ApprovalRequest.__table__  # type: ignore[assignment]
    keyed = table.c.idempotency_key.is_not(None) if dialect == "sqlite" else None
    return insert_ignoring_conflicts(dialect, table, ("org_id", "idempotency_key"), keyed)


def _insert_request(dialect: str) -> PreparedQuery:
    """A new request's insert: every column (``typed_rows.new_row`` gives each a value)."""
    return PreparedQuery(_unless_key_taken(dialect), column_keys=COLUMNS)


_INSERT_REQUEST = {dialect: _insert_request(dialect) for dialect in ("sqlite", "postgresql")}
_AUDIT_EVENTS: Table = AuditEvent.__table__  # type: ignore[assignment]
_EVENT_COLUMNS = ("id", "org_id", "request_id", "type", "actor_id", "data", "created_at")
_INSERT_EVENT = PreparedQuery(insert(_AUDIT_EVENTS), column_keys=_EVENT_COLUMNS)


@functools.cache
def _insert_rows(table: Table, columns: tuple[str, ...], count: int) -> PreparedQuery:
    """SQLite: ``count`` rows of ``table`` in one statement (one ``VALUES`` row each,
    parameters named ``<column>_<index>``, as ``_rows_params`` names them)."""
    rows = [
        {c: bindparam(f"{c}_{i}", type_=table.c[c].type) for c in columns} for i in range(count)
    ]
    return PreparedQuery(insert(table).values(rows))


def _rows_params(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The parameters of ``_insert_rows`` for ``rows``, each row's values by column."""
    return {f"{column}_{i}": value for i, row in enumerate(rows) for column, value in row.items()}


def _insert_events(count: int) -> PreparedQuery:
    """SQLite: ``count`` events in one statement: a create a policy or a standing
    approval decides writes its own event and its decision's together."""
    return _insert_rows(_AUDIT_EVENTS, _EVENT_COLUMNS, count)


def _next_number(org_id: Any) -> Any:
    """PostgreSQL: the org's next request number, drawn from its own sequence (migration
    0024). A sequence holds no lock until the create commits, as a counter row would:
    the org's concurrent creates never wait on each other for their numbers."""
    return func.signoff_next_request_number(org_id, type_=Integer)


# SQLite: the last number given in each org, kept by the insert trigger of the org's
# request count (migrations 0005 and 0024). A create takes the next inside its write
# transaction, which no other writer shares.
_REQUEST_COUNTS = table(
    "approval_request_counts", column("org_id", Uuid()), column("issued", Integer())
)


def _insert_numbered_sqlite() -> PreparedQuery:
    """SQLite: a new request's insert (``_INSERT_REQUEST``) that numbers the request
    itself, the org's last number plus one read by a subquery of the same statement,
    and answers the number it gave (none if the idempotency key is taken): one statement
    where reading the number first took two."""
    table: Table = ApprovalRequest.__table__  # type: ignore[assignment]
    last = (
        select(_REQUEST_COUNTS.c.issued)
        .where(_REQUEST_COUNTS.c.org_id == bindparam("org_id", type_=table.c.org_id.type))
        .scalar_subquery()
    )
    next_number = func.coalesce(last, literal_column("0")) + literal_column("1")
    values = {
        c: next_number if c == "number" else bindparam(c, type_=table.c[c].type) for c in COLUMNS
    }
    return PreparedQuery(_unless_key_taken("sqlite").values(values).returning(table.c.number))


_INSERT_NUMBERED_SQLITE = _insert_numbered_sqlite()


@dataclass(frozen=True)
class CreatedPlan:
    """How a create's notification plan row is written on PostgreSQL, as a part of the
    create's own statement (the notifications domain's, given by the unit of work):
    ``insert_from`` the insert of it from the created request's ``RETURNING id,
    org_id``, made only where its org can notify; ``written`` marks the session once one
    was (the sender is woken after the commit). Both module-level functions: the
    statement is built once for them."""

    insert_from: Callable[[Any], Insert]
    written: Callable[[AsyncSession], None]


@dataclass
class StandingUse:
    """The use of a standing approval that a create's statement takes (PostgreSQL,
    ``insert_unless_key_taken``): the request is inserted only if the use was. The
    create answers ``uses``, the approval's uses after it (None: none taken), and sets
    them in ``event_data``, the decision event's ``standing_approval``."""

    standing_id: uuid.UUID
    now: datetime
    event_data: dict[str, Any] | None = None
    uses: int | None = None


class StandingUseLost(Exception):
    """The standing approval a create matched was used up, expired or revoked before its
    statement could take the use: nothing was written (``StandingUse``)."""


def _check_use_taken(written: Any, standing: StandingUse) -> None:
    """After a create's statement that was to take a standing approval's use: raise
    ``StandingUseLost`` if it could not (not for a replayed key or a revoked principal,
    which write nothing anyway); else the decision event tells the uses it counted."""
    if standing.uses is None:
        if written.principal_live and not written.key_taken:
            raise StandingUseLost(standing.standing_id)
    elif written.requests and standing.event_data is not None:
        standing.event_data["uses"] = standing.uses


@functools.cache
def _create_alone(
    guarded: bool, plan_from: Callable[[Any], Insert], standing: bool = False, keyed: bool = True
) -> PreparedQuery:
    """PostgreSQL: everything a create writes, in one statement that is its own
    transaction (autocommit: no ``BEGIN`` and ``COMMIT`` round trips): the request, its
    ``request.created`` event and its notification plan row (``plan_from``, where the org
    can notify), each inserted from the request's ``RETURNING``, so a create whose
    idempotency key is taken writes none.

    ``guarded``: the principal came from memory, and the statement writes only while
    ``principal_guard`` holds (a revoked key writes nothing). It answers
    ``principal_live`` and how many requests, events and plans it wrote.

    ``standing``: the request is one a standing approval approves, and the statement
    takes its use (``standing_repository.take_use`` of ``standing_id``) before it
    inserts the request, which it inserts only if it took it. It answers the uses after
    it (``standing_uses``, null: not taken) and whether the idempotency key was taken.

    ``keyed``: the create has an idempotency key. Without one nothing can conflict (the
    unique index holds NULLs apart), so the statement reads nothing of the org's
    requests."""
    table: Table = ApprovalRequest.__table__  # type: ignore[assignment]
    live = select((principal_guard() if guarded else true()).label("ok")).cte("live")
    org_id = bindparam("org_id", type_=table.c.org_id.type)
    # An idempotency key already taken: nothing is inserted, and no number is drawn for
    # a replay (a race of two creates with one key may still draw one in vain).
    # The org by ``IS NOT DISTINCT FROM``, which no index applies: the lookup can use the
    # key's index (led by the key, migration 0056) and none led by org_id, which a generic
    # plan made before the table's first ANALYZE may take to read every request of the org.
    key_taken = exists().where(
        table.c.idempotency_key == bindparam("idempotency_key", type_=table.c.idempotency_key.type),
        table.c.org_id.is_not_distinct_from(org_id),
    )
    conditions: list[Any] = [live.c.ok]
    if keyed:
        conditions.append(~key_taken.correlate(None))
    if standing:
        use = take_use(
            bindparam("standing_id", type_=table.c.standing_approval_id.type),
            bindparam("standing_now", type_=table.c.created_at.type),
            *conditions,
        ).cte("standing_use")
        conditions.append(exists(select(use.c.uses)))
    values = select(
        *(
            _next_number(org_id) if c == "number" else bindparam(c, type_=table.c[c].type)
            for c in COLUMNS
        )
    ).where(*conditions)
    created = (
        postgresql.insert(table)
        .from_select(list(COLUMNS), values)
        .on_conflict_do_nothing(index_elements=["org_id", "idempotency_key"])
        .returning(table.c.id, table.c.org_id, table.c.number)
        .cte("created")
    )
    events = _AUDIT_EVENTS.c
    event_rows = (
        insert(_AUDIT_EVENTS)
        .from_select(
            _EVENT_COLUMNS,
            select(
                bindparam("event_id", type_=events.id.type),
                created.c.org_id,
                created.c.id,
                bindparam("event_type", type_=events.type.type),
                bindparam("event_actor_id", type_=events.actor_id.type),
                bindparam("event_data", type_=events.data.type),
                bindparam("event_created_at", type_=events.created_at.type),
            ),
        )
        .returning(literal_column("1").label("one"))
        .cte("events")
    )
    plans = plan_from(created).returning(literal_column("1").label("one")).cte("plans")

    def count(cte: Any, label: str) -> Any:
        return select(func.count()).select_from(cte).scalar_subquery().label(label)

    answers = [
        live.c.ok.label("principal_live"),
        count(created, "requests"),
        count(event_rows, "events"),
        count(plans, "plans"),
        select(func.max(created.c.number)).scalar_subquery().label("number"),
    ]
    if standing:
        answers += [
            select(func.max(use.c.uses)).scalar_subquery().label("standing_uses"),
            (key_taken.correlate(None) if keyed else false()).label("key_taken"),
        ]
    return PreparedQuery(select(*answers))


# A decision's writes and reads, run by every decide (prepared.py).
_INSERT_VOTE = PreparedQuery(
    insert(Vote),
    column_keys=(
        "id",
        "request_id",
        "step_id",
        "user_id",
        "on_behalf_of",
        "decision",
        "comment",
        "created_at",
    ),
)
_COUNT_BASED_VOTERS = PreparedQuery(
    select(Vote.user_id).where(Vote.request_id == bindparam("request_id"), Vote.step_id.is_(None))
)

# Who asked: the request's connection and that connection's owner now (self-approval).
_REQUESTER = PreparedQuery(
    select(ApprovalRequest.connection_id, Connection.owner_id)
    .join(Connection, Connection.id == ApprovalRequest.connection_id)
    .where(
        ApprovalRequest.id == bindparam("request_id"),
        ApprovalRequest.org_id == bindparam("org_id"),
    )
)

# Who a voter stands in for now, with their names (orgs/delegation.py).
_STOOD_IN_FOR = PreparedQuery(
    select(User.id, User.name).where(
        User.org_id == bindparam("org_id"),
        User.id.in_(stood_in_for(bindparam("voter"), bindparam("now"))),
    )
)

_REQUEST_BY_ID = PreparedQuery(
    select(*request_columns()).where(
        ApprovalRequest.id == bindparam("request_id"),
        ApprovalRequest.org_id == bindparam("org_id"),
    ),
    row_type=RequestRecord,
)
# PostgreSQL: the version of a request's row (its ``xmin``, as text), read by a decision
# made without a lock and named by its compare-and-set (``ApprovalRepository.
# read_versioned``): any writer of the request changes it.
_ROW_VERSION = literal_column("approval_requests.xmin::text", String)
_REQUEST_VERSIONED = {
    guarded: PreparedQuery(
        select(
            *request_columns(),
            _ROW_VERSION.label("version"),
            *([principal_guard().label("principal_live")] if guarded else []),
        ).where(
            ApprovalRequest.id == bindparam("request_id"),
            ApprovalRequest.org_id == bindparam("org_id"),
        )
    )
    for guarded in (False, True)
}
# The same with the request's chain, in step order: one row per step (one with no step
# when there is none), the step's columns last, named ``step_<field>``. A step vote reads
# its request and chain in one statement, one snapshot (``read_versioned``).
_STEP_FIELDS = StepRecord._fields
_REQUEST_AND_CHAIN_VERSIONED = {
    guarded: PreparedQuery(
        select(
            *request_columns(),
            _ROW_VERSION.label("version"),
            *([principal_guard().label("principal_live")] if guarded else []),
            *(getattr(ApprovalStep, name).label(f"step_{name}") for name in _STEP_FIELDS),
        )
        .select_from(ApprovalRequest)
        .outerjoin(ApprovalStep, ApprovalStep.request_id == ApprovalRequest.id)
        .where(
            ApprovalRequest.id == bindparam("request_id"),
            ApprovalRequest.org_id == bindparam("org_id"),
        )
        .order_by(ApprovalStep.step_order)
    )
    for guarded in (False, True)
}
# A get's one statement when its principal came from memory (see the guarded lock above).
_REQUEST_BY_ID_GUARDED = PreparedQuery(
    select(*request_columns(), principal_guard().label("principal_live")).where(
        ApprovalRequest.id == bindparam("request_id"),
        ApprovalRequest.org_id == bindparam("org_id"),
    )
)
_STEPS_OF_REQUEST = PreparedQuery(
    select(*columns_of(ApprovalStep, StepRecord))
    .where(ApprovalStep.request_id == bindparam("request_id"))
    .order_by(ApprovalStep.step_order),
    row_type=StepRecord,
)
# On the table, not the entity: through a session on PostgreSQL, the ORM's bulk forms of
# these statements answer no row count.
_STEPS: Table = ApprovalStep.__table__  # type: ignore[assignment]
_DELETE_STEPS = PreparedQuery(delete(_STEPS).where(_STEPS.c.request_id == bindparam("request_id")))
_INSERT_STEP = PreparedQuery(
    insert(_STEPS),
    column_keys=(
        "id", "request_id", "step_order", "approver_id", "status", "decided_at", "decided_by",
        "comment", "created_at", "group_id", "required_approvals", "current_approvals",
    ),
)  # fmt: skip
_PENDING_STEP = update(_STEPS).where(
    _STEPS.c.id == bindparam("step_id"), _STEPS.c.status == "pending"
)
_STEP_DECISION: dict[str, Any] = {
    "status": bindparam("new_status"),
    "decided_at": bindparam("new_decided_at"),
    "decided_by": bindparam("new_decided_by"),
    "comment": bindparam("new_comment"),
}
# A step's vote: only while the step is pending, like a request's compare-and-set.
_DECIDE_STEP = PreparedQuery(_PENDING_STEP.values(_STEP_DECISION))
# Approve with edits: a step approved on the old arguments opens again.
_REOPEN_STEP = PreparedQuery(
    update(_STEPS)
    .where(_STEPS.c.id == bindparam("step_id"), _STEPS.c.status == "approved")
    .values(status="pending", decided_at=None, decided_by=None, comment=None, current_approvals=0)
)
# A group step's vote: its quorum reached (decided and counted), or not yet (counted).
_STEP_COUNT: dict[str, Any] = {"current_approvals": bindparam("new_current_approvals")}
_DECIDE_GROUP_STEP = PreparedQuery(_PENDING_STEP.values({**_STEP_DECISION, **_STEP_COUNT}))
_COUNT_STEP = PreparedQuery(_PENDING_STEP.values(_STEP_COUNT))
# Approve with edits: the votes cast on the old arguments no longer count.
_DELETE_VOTES = PreparedQuery(delete(Vote).where(Vote.request_id == bindparam("request_id")))
_ANY_VOTE = PreparedQuery(
    select(Vote.id).where(Vote.request_id == bindparam("request_id")).limit(1)
)
# A group step's voters may be its group's active members: on the members' primary key,
# then each user's; none when the group is not the org's.
_ACTIVE_MEMBERS = PreparedQuery(
    select(GroupMember.user_id)
    .join(Group, Group.id == GroupMember.group_id)
    .join(User, User.id == GroupMember.user_id)
    .where(
        GroupMember.group_id == bindparam("group_id"),
        Group.org_id == bindparam("org_id"),
        User.deactivated_at.is_(None),
    )
)
# A group of the org, by id (a chain's step names it; another org's is not found).
_GROUP_NAME = PreparedQuery(
    select(Group.id, Group.name).where(
        Group.id == bindparam("group_id"), Group.org_id == bindparam("org_id")
    )
)
_VOTES_ON_REQUEST = PreparedQuery(
    select(*columns_of(Vote, VoteRecord))
    .where(Vote.request_id == bindparam("request_id"))
    .order_by(Vote.created_at, Vote.id),
    row_type=VoteRecord,
)


@functools.lru_cache(maxsize=64)
def _org_users_among(count: int) -> PreparedQuery:
    """Which of ``count`` user ids (parameters ``user_0`` ...) belong to the org: one
    statement per count of approvers a chain has (at most ``SIGNOFF_MAX_STEPS``)."""
    candidates = [bindparam(f"user_{index}", type_=User.id.type) for index in range(count)]
    return PreparedQuery(
        select(User.id).where(User.org_id == bindparam("org_id"), User.id.in_(candidates))
    )


@functools.cache
def _update_if_pending(columns: frozenset[str], *, versioned: bool = False) -> PreparedQuery:
    """The compare-and-set of a transition that sets ``columns`` (one of a few sets);
    ``versioned``: also only while the row is at the version read (``_ROW_VERSION``)."""
    conditions = [
        ApprovalRequest.id == bindparam("request_id"),
        ApprovalRequest.status == "pending",
    ]
    if versioned:
        conditions.append(bindparam("expected_version", type_=String) == _ROW_VERSION)
    return PreparedQuery(
        update(ApprovalRequest)
        .where(*conditions)
        .values({column: bindparam(f"new_{column}") for column in sorted(columns)})
        .execution_options(synchronize_session=False)
    )


@functools.cache
def _decide_unread(columns: frozenset[str], bounded: bool) -> PreparedQuery:
    """A decision written without a read of its request (``state.UnreadDecision``): the
    compare-and-set of its condition, setting ``columns`` and answering the request as
    written; ``bounded``: the condition caps ``required_approvals`` (an approval)."""
    conditions = [
        ApprovalRequest.id == bindparam("request_id"),
        ApprovalRequest.org_id == bindparam("org_id"),
        ApprovalRequest.status == bindparam("status_before", type_=String),
        or_(ApprovalRequest.expires_at.is_(None), ApprovalRequest.expires_at > bindparam("now")),
        ApprovalRequest.has_steps.is_(False),
        ApprovalRequest.current_approvals == bindparam("approvals_before"),
    ]
    if bounded:
        conditions.append(ApprovalRequest.required_approvals <= bindparam("most_required"))
    return PreparedQuery(
        update(ApprovalRequest)
        .where(*conditions)
        .values({column: bindparam(f"new_{column}") for column in sorted(columns)})
        .returning(*request_columns()),
        row_type=RequestRecord,
    )


class ApprovalReads:
    """The reads of a get, as prepared queries outside any session (prepared.py).

    Rows have the fields of the ORM entities, so services and presenters take either.
    Each query reads the latest committed state on its own: a read that must see one
    snapshot with a write, or lock, uses ``ApprovalRepository`` in a transaction instead.
    """

    def __init__(self, queries: QueryRunner) -> None:
        self.queries = queries

    async def get(
        self, org_id: uuid.UUID, request_id: uuid.UUID, check: PrincipalCheck | None = None
    ) -> RequestRecord | None:
        """The request; with ``check`` (a principal from memory, not yet confirmed), the
        same read confirms the principal (``PrincipalCheck.confirm``), or raises
        ``StalePrincipal``. With no such request nothing is confirmed: the caller's
        answer waits for a read of the principal (``middleware.ApiGuard``)."""
        params = {"request_id": request_id, "org_id": org_id}
        if check is None or check.confirmed:
            return cast(RequestRecord | None, await self.queries.one(_REQUEST_BY_ID, params))
        row = await self.queries.one(_REQUEST_BY_ID_GUARDED, params | principal_guard_params(check))
        return _confirmed(row, check)

    async def list_steps(self, request_id: uuid.UUID) -> list[StepRecord]:
        return await self.queries.all(_STEPS_OF_REQUEST, {"request_id": request_id})

    async def list_votes(self, request_id: uuid.UUID) -> list[VoteRecord]:
        return await self.queries.all(_VOTES_ON_REQUEST, {"request_id": request_id})

    async def active_members(
        self, org_id: uuid.UUID, group_ids: Collection[uuid.UUID]
    ) -> dict[uuid.UUID, frozenset[uuid.UUID]]:
        """Each group's active members (a chain names one or a few groups)."""
        return await _active_members(self.queries.all, org_id, group_ids)

    async def group_names(
        self, org_id: uuid.UUID, group_ids: Collection[uuid.UUID]
    ) -> dict[uuid.UUID, str]:
        """The names of those of ``group_ids`` that are groups of the org."""
        return await _group_names(self.queries.all, org_id, group_ids)

    async def count_based_voters(self, request_id: uuid.UUID) -> frozenset[uuid.UUID]:
        rows = await self.queries.all(_COUNT_BASED_VOTERS, {"request_id": request_id})
        return frozenset(row.user_id for row in rows)

    async def org_user_ids(
        self, org_id: uuid.UUID, user_ids: set[uuid.UUID]
    ) -> frozenset[uuid.UUID]:
        """Which of ``user_ids`` are users of the org."""
        if not user_ids:  # a chain of groups names nobody
            return frozenset()
        query, params = _org_users_query(org_id, user_ids)
        return frozenset(row.id for row in await self.queries.all(query, params))


async def _active_members(
    run: Callable[[PreparedQuery, dict[str, Any]], Awaitable[Sequence[Any]]],
    org_id: uuid.UUID,
    group_ids: Collection[uuid.UUID],
) -> dict[uuid.UUID, frozenset[uuid.UUID]]:
    """Each group's active members, read by ``run`` (one query a group, on its key)."""
    found = {}
    for group_id in group_ids:
        rows = await run(_ACTIVE_MEMBERS, {"group_id": group_id, "org_id": org_id})
        found[group_id] = frozenset(row.user_id for row in rows)
    return found


async def _group_names(
    run: Callable[[PreparedQuery, dict[str, Any]], Awaitable[Sequence[Any]]],
    org_id: uuid.UUID,
    group_ids: Collection[uuid.UUID],
) -> dict[uuid.UUID, str]:
    """The names of those of ``group_ids`` that are the org's groups, read by ``run``."""
    names = {}
    for group_id in group_ids:
        for row in await run(_GROUP_NAME, {"group_id": group_id, "org_id": org_id}):
            names[row.id] = row.name
    return names


def _org_users_query(
    org_id: uuid.UUID, user_ids: set[uuid.UUID]
) -> tuple[PreparedQuery, dict[str, Any]]:
    params: dict[str, Any] = {f"user_{i}": user_id for i, user_id in enumerate(user_ids)}
    params["org_id"] = org_id
    return _org_users_among(len(user_ids)), params


@dataclass(frozen=True)
class NewEvent:
    """An audit event to write: what ``AuditEvent`` holds, without the cost of building
    an ORM instance (instrumented attributes) that is only read once."""

    org_id: uuid.UUID
    request_id: uuid.UUID
    type: str
    actor_id: uuid.UUID | None
    data: dict[str, Any]
    created_at: datetime
    id: uuid.UUID | None = None


@dataclass(frozen=True)
class NewVote:
    """A vote to write (see ``NewEvent``)."""

    request_id: uuid.UUID
    user_id: uuid.UUID
    decision: str
    created_at: datetime
    step_id: uuid.UUID | None = None
    comment: str | None = None
    id: uuid.UUID | None = None
    on_behalf_of: uuid.UUID | None = None


def _confirmed(row: Any, check: PrincipalCheck) -> RequestRecord | None:
    """The request of a guarded read (its last column the guard's answer), once the
    guard has confirmed the principal."""
    if row is None:
        return None
    check.confirm(row.principal_live)
    return RequestRecord._make(row[:-1])


class ApprovalRepository:
    def __init__(
        self,
        session: AsyncSession,
        dialect: str,
        queries: QueryRunner | None = None,
        created_plan: CreatedPlan | None = None,
    ) -> None:
        """``queries``: where a PostgreSQL create that is its transaction's one write runs
        in autocommit (``insert_unless_key_taken``); without it, in the session.
        ``created_plan``: how a create writes its notification plan row with it (a
        transaction that creates nothing needs none)."""
        self.session = session
        self.dialect = dialect
        self.queries = queries
        self._created_plan = created_plan
        # Requests whose compare-and-set names the row version read (``unless_changed``).
        self._expected_versions: dict[uuid.UUID, str] = {}
        # The chains ``replace_steps`` wrote, by request (``chain_written``).
        self._chains_written: dict[uuid.UUID, list[StepRecord]] = {}

    async def requester(
        self, org_id: uuid.UUID, request_id: uuid.UUID
    ) -> tuple[uuid.UUID, uuid.UUID] | None:
        """The request's connection and that connection's owner; None: no such request.
        Read on its own (autocommit where there is one), so that a decision made without
        a lock still may be (``can_decide_without_lock``)."""
        params = {"request_id": request_id, "org_id": org_id}
        if self._reads_alone:
            row = await self.queries.one(_REQUESTER, params)  # type: ignore[union-attr]
        else:
            row = (await self.session.execute(_REQUESTER.statement, params)).first()
        return (row[0], row[1]) if row is not None else None

    async def stood_in_for(
        self, org_id: uuid.UUID, voter_id: uuid.UUID, now: datetime
    ) -> dict[uuid.UUID, str]:
        """The away people ``voter_id`` stands in for at ``now``, with their names
        (``orgs.repository.stood_in_for``). Read on its own, as ``requester``."""
        params = {"voter": voter_id, "now": now, "org_id": org_id}
        rows: Sequence[Any]
        if self._reads_alone:
            rows = await self.queries.all(_STOOD_IN_FOR, params)  # type: ignore[union-attr]
        else:
            rows = (await self.session.execute(_STOOD_IN_FOR.statement, params)).all()
        return {row[0]: row[1] for row in rows if row[0] != voter_id}

    @property
    def _reads_alone(self) -> bool:
        """PostgreSQL, before the session has begun: a read may go out in autocommit,
        keeping a decision's transaction free to write alone. Elsewhere (SQLite, whose
        writer a begun transaction may hold) it is read in the session."""
        return may_write_alone(self.session, self.queries)

    @property
    def can_decide_without_lock(self) -> bool:
        """PostgreSQL, with ``queries``, in a transaction that has begun nothing yet (a
        decision is not its only work otherwise, say a notification link's consumed in
        it): a decision may read its request without a lock and write in one statement,
        conditional on the version it read (``read_versioned``, ``unless_changed``)."""
        return self.dialect == "postgresql" and may_write_alone(self.session, self.queries)

    async def read_versioned(
        self,
        org_id: uuid.UUID,
        request_id: uuid.UUID,
        check: PrincipalCheck | None = None,
        *,
        with_chain: bool = False,
    ) -> tuple[RequestRecord, str, list[StepRecord] | None] | None:
        """PostgreSQL: the request, read now without a lock outside the transaction, its
        row version, for ``unless_changed``, and with ``with_chain`` its chain in step
        order, read by the same statement (else None). ``check``: as ``ApprovalReads.get``'s."""
        assert self.queries is not None
        params: dict[str, Any] = {"request_id": request_id, "org_id": org_id}
        guarded = check is not None and not check.confirmed
        if guarded:
            assert check is not None
            params |= principal_guard_params(check)
        queries = _REQUEST_AND_CHAIN_VERSIONED if with_chain else _REQUEST_VERSIONED
        rows = await self.queries.all(queries[guarded], params)
        if not rows:
            return None
        first = rows[0]
        if guarded:
            assert check is not None
            check.confirm(first.principal_live)
        record = RequestRecord(*first[: len(RequestRecord._fields)])
        if not with_chain:
            return record, first.version, None
        width = len(_STEP_FIELDS)
        chain = [StepRecord(*row[-width:]) for row in rows if row.step_id is not None]
        return record, first.version, chain

    @contextlib.asynccontextmanager
    async def unless_changed(self, request_id: uuid.UUID, version: str) -> AsyncIterator[None]:
        """The block's writes go out as one statement of their own, made only if the
        request is still at ``version`` (its compare-and-set names it): else nothing is
        written and ``storage.LostRace`` is raised (``storage.writes_alone``)."""
        assert self.queries is not None
        self._expected_versions[request_id] = version
        try:
            async with writes_alone(self.session, self.queries):
                yield
        finally:
            self._expected_versions.pop(request_id, None)

    @property
    def can_write_plan_with_insert(self) -> bool:
        """Whether ``insert_unless_key_taken`` writes the new request's notification plan
        row itself (PostgreSQL: in its one statement)."""
        return self.dialect == "postgresql" and self._created_plan is not None

    @property
    def writes_at_once(self) -> bool:
        """Whether a queued write (``storage.queue_write``) is made when queued (SQLite):
        after only such writes, ``flush`` has nothing to send."""
        return self.dialect == "sqlite"

    # ---- requests ----

    async def insert_unless_key_taken(
        self,
        row: dict[str, Any],
        record: RequestRecord,
        event: NewEvent,
        check: PrincipalCheck | None = None,
        *,
        then: Sequence[NewEvent] = (),
        standing: StandingUse | None = None,
    ) -> RequestRecord | None:
        """Insert a request (``row``, every column; ``record``, the same as a record) and
        its ``request.created`` audit ``event``, then the events ``then`` (a policy's
        notes, the decision of a create a policy or a standing approval decided); the row
        as written, or None (and no event) if its idempotency key is already taken in
        the org. On SQLite the events are one statement; on PostgreSQL ``then`` is queued
        (``queue_write``) after the create's own statement.

        ``ON CONFLICT DO NOTHING`` against the org's idempotency keys being unique:
        of concurrent creates with one key exactly one inserts, on both databases. On
        PostgreSQL the inserts, with the notification plan row (``can_write_plan_with_insert``),
        are one statement (``_create_alone``), run in autocommit when it is the
        transaction's first statement, and confirming ``check``'s principal.

        The request's number is the org's next, given by the insert itself: on PostgreSQL
        drawn from the org's sequence (``_next_number``), on SQLite the org's last plus
        one, read in this write transaction (``_INSERT_NUMBERED_SQLITE``). The unique
        (org_id, number) index stands behind both.

        ``standing``: PostgreSQL, the create's statement takes the standing approval's
        use too (``_create_alone``), in the session's transaction, since the decision's
        writes follow; raises ``StandingUseLost`` (nothing written) if it could not. On
        SQLite the insert's trigger takes it (migration 0051).
        """
        # The new row is what was written: the values read back as written (UTC
        # timestamps, the same JSON), with the number the insert gave it.
        if self.dialect == "postgresql":
            params = {
                **row,
                "event_id": event.id or new_id(),
                "event_type": event.type,
                "event_actor_id": event.actor_id,
                "event_data": event.data,
                "event_created_at": event.created_at,
                "plan_id": new_id(),
                "plan_created_at": event.created_at,
            }
            guarded = check is not None and not check.confirmed
            if guarded:
                assert check is not None
                params |= principal_guard_params(check)
            assert self._created_plan is not None  # ``can_write_plan_with_insert``
            query = _create_alone(
                guarded,
                self._created_plan.insert_from,
                standing is not None,
                row["idempotency_key"] is not None,
            )
            if standing is None:
                (written,) = await execute_alone(self.session, self.queries, query, params)
            else:
                written = await self._create_with_use(query, params, standing)
            if guarded:
                assert check is not None
                check.confirm(written.principal_live)
            if standing is not None:
                _check_use_taken(written, standing)
            if not written.requests:
                return None
            if written.plans:  # its org can notify: the sender is woken
                self._created_plan.written(self.session)
            for later in then:
                await self.add_event(later)
            return record._replace(number=written.number)
        numbered = await execute_in(self.session, _INSERT_NUMBERED_SQLITE, row)
        if not numbered:
            return None
        if then:
            await self._add_events_at_once([event, *then])
        else:
            await self.add_event(event)
        return record._replace(number=numbered[0].number)

    async def _create_with_use(
        self, query: PreparedQuery, params: dict[str, Any], standing: StandingUse
    ) -> Any:
        """PostgreSQL: the create's statement taking the standing approval's use too, in
        the session's transaction (the decision's writes follow it)."""
        params |= {"standing_id": standing.standing_id, "standing_now": standing.now}
        (written,) = await execute_in(self.session, query, params)
        standing.uses = written.standing_uses
        return written

    async def _add_events_at_once(self, events: Sequence[NewEvent]) -> None:
        """SQLite: the events in one statement (``_insert_events``), in order."""
        rows = []
        for item in events:
            values = _new_row_values(item, _INSERT_EVENT)
            values["data"] = item.data if item.data is not None else {}
            rows.append(values)
        await count_in(self.session, _insert_events(len(events)), _rows_params(rows))

    async def find_by_idempotency_key(self, org_id: uuid.UUID, key: str) -> RequestRecord | None:
        rows = await execute_in(self.session, _REQUEST_BY_KEY, {"org_id": org_id, "key": key})
        return cast(RequestRecord, rows[0]) if rows else None

    async def get(
        self, org_id: uuid.UUID, request_id: uuid.UUID, check: PrincipalCheck | None = None
    ) -> RequestRecord | None:
        params = {"request_id": request_id, "org_id": org_id}
        if check is None or check.confirmed:
            rows = await execute_in(self.session, _REQUEST_BY_ID, params)
            return cast(RequestRecord, rows[0]) if rows else None
        params |= principal_guard_params(check)
        rows = await execute_in(self.session, _REQUEST_BY_ID_GUARDED, params)
        return _confirmed(rows[0] if rows else None, check)

    async def get_locked(
        self, org_id: uuid.UUID, request_id: uuid.UUID, check: PrincipalCheck | None = None
    ) -> RequestRecord | None:
        """The request, locked for this transaction (``FOR UPDATE`` on PostgreSQL; on
        SQLite the transaction holds the write lock already): where every writer of a
        request starts from. ``check``: as ``ApprovalReads.get``'s."""
        params = {"request_id": request_id, "org_id": org_id}
        if check is None or check.confirmed:
            rows = await execute_in(self.session, _REQUEST_FOR_UPDATE, params)
            return cast(RequestRecord, rows[0]) if rows else None
        params |= principal_guard_params(check)
        rows = await execute_in(self.session, _REQUEST_FOR_UPDATE_GUARDED, params)
        return _confirmed(rows[0] if rows else None, check)

    @property
    def can_decide_unread(self) -> bool:
        """SQLite: a decision may be written before its request is read
        (``decide_unread``); its transaction holds the write lock from its first statement,
        so the row answered is the one the decision was made on. PostgreSQL keeps its
        read without a lock (``can_decide_without_lock``)."""
        return self.dialect == "sqlite"

    async def decide_unread(
        self,
        org_id: uuid.UUID,
        request_id: uuid.UUID,
        unread: UnreadDecision,
        values: dict[str, Any],
        now: datetime,
    ) -> RequestRecord | None:
        """Set ``values`` on the org's request if ``unread``'s condition holds for it at
        ``now`` (``state.UnreadDecision``), in one statement: the request as written, or
        None, having written nothing (no such request, or the condition does not hold)."""
        bounded = unread.most_required is not None
        params = {f"new_{column}": value for column, value in values.items()}
        params |= {
            "request_id": request_id,
            "org_id": org_id,
            "status_before": unread.status_before,
            "approvals_before": unread.approvals_before,
            "now": now,
        }
        if bounded:
            params["most_required"] = unread.most_required
        rows = await execute_in(self.session, _decide_unread(frozenset(values), bounded), params)
        return cast(RequestRecord, rows[0]) if rows else None

    async def update_if_pending(
        self, request_id: uuid.UUID, values: dict[str, Any], refusal: Callable[[], Exception]
    ) -> None:
        """Compare-and-set: change a request only while it is still pending, else raise
        ``refusal()`` (now, or when the transaction's queued writes are sent)."""
        version = self._expected_versions.get(request_id)
        statement = _update_if_pending(frozenset(values), versioned=version is not None)
        params = {f"new_{column}": value for column, value in values.items()}
        params["request_id"] = request_id
        if version is not None:
            params["expected_version"] = version
        await queue_write(self.session, statement, params, unless_one_row=refusal)

    async def update_many_if_pending(
        self, changes: Sequence[tuple[uuid.UUID, dict[str, Any]]]
    ) -> int:
        """``update_if_pending`` for many requests; answers how many changed.

        Requests given the same values share one statement (``UPDATE ... WHERE id IN``):
        requests that fall due at one instant, say, are expired in one.
        """
        groups: dict[tuple[tuple[str, Any], ...], list[uuid.UUID]] = {}
        for request_id, values in changes:
            groups.setdefault(tuple(sorted(values.items())), []).append(request_id)
        changed = 0
        for shared, ids in groups.items():
            result = await self.session.execute(
                update(ApprovalRequest)
                .where(ApprovalRequest.id.in_(ids), ApprovalRequest.status == "pending")
                .values(dict(shared))
                .execution_options(synchronize_session=False)
            )
            changed += result.rowcount  # type: ignore[attr-defined]
        return changed

    async def due_for_expiry(
        self, now: datetime, limit: int, skip: Collection[uuid.UUID] = ()
    ) -> list[RequestRecord]:
        """Pending requests past their deadline, oldest deadline first, locked for us;
        ``skip``: rows parked after failing (common/poison.py).

        SKIP LOCKED lets several workers sweep at once on PostgreSQL without waiting on or
        double-processing each other's rows. It passes over any row another transaction
        holds, not only a sweep's: a decision's, or the notification planner's share lock
        (``share_lock_pending``: the request must not change until its reminders are
        written). Such a row is left to a later sweep.
        """
        statement = (
            select(*request_columns())
            .where(
                ApprovalRequest.status == "pending",
                ApprovalRequest.expires_at.is_not(None),
                ApprovalRequest.expires_at <= now,
                *not_among(ApprovalRequest.id, skip),
            )
            .order_by(ApprovalRequest.expires_at)
            .limit(limit)
            .with_for_update(skip_locked=True)
        )
        return [RequestRecord(*row) for row in await self.session.execute(statement)]

    def savepoint(self) -> contextlib.AbstractAsyncContextManager[None]:
        """A savepoint: what a block writes inside it is undone alone if the block raises."""
        return savepoint(self.session)

    async def pending_ids(self, org_id: uuid.UUID) -> Sequence[uuid.UUID]:
        result = await self.session.scalars(
            select(ApprovalRequest.id).where(
                ApprovalRequest.org_id == org_id, ApprovalRequest.status == "pending"
            )
        )
        return result.all()

    # ---- votes ----

    async def count_based_voters_of(
        self, request_ids: Collection[uuid.UUID]
    ) -> dict[uuid.UUID, frozenset[uuid.UUID]]:
        """``count_based_voters`` of many requests in one query (those without any vote
        are left out)."""
        if not request_ids:
            return {}
        rows = await self.session.execute(
            select(Vote.request_id, Vote.user_id).where(
                Vote.request_id.in_(list(request_ids)), Vote.step_id.is_(None)
            )
        )
        voters: dict[uuid.UUID, set[uuid.UUID]] = {}
        for request_id, user_id in rows:
            voters.setdefault(request_id, set()).add(user_id)
        return {request_id: frozenset(users) for request_id, users in voters.items()}

    async def count_based_voters(self, request_id: uuid.UUID) -> frozenset[uuid.UUID]:
        rows = await execute_in(self.session, _COUNT_BASED_VOTERS, {"request_id": request_id})
        return frozenset(row.user_id for row in rows)

    async def add_vote(self, vote: Vote | NewVote) -> None:
        await queue_write(self.session, _INSERT_VOTE, _new_row_values(vote, _INSERT_VOTE))

    async def delete_votes(self, request_id: uuid.UUID) -> None:
        await queue_write(self.session, _DELETE_VOTES, {"request_id": request_id})

    async def has_votes(self, request_id: uuid.UUID) -> bool:
        return bool(await execute_in(self.session, _ANY_VOTE, {"request_id": request_id}))

    async def list_votes(self, request_id: uuid.UUID) -> list[VoteRecord]:
        return await execute_in(self.session, _VOTES_ON_REQUEST, {"request_id": request_id})

    async def active_members(
        self, org_id: uuid.UUID, group_ids: Collection[uuid.UUID]
    ) -> dict[uuid.UUID, frozenset[uuid.UUID]]:
        """Each group's active members (a chain names one or a few groups)."""
        return await _active_members(functools.partial(execute_in, self.session), org_id, group_ids)

    async def group_names(
        self, org_id: uuid.UUID, group_ids: Collection[uuid.UUID]
    ) -> dict[uuid.UUID, str]:
        """The names of those of ``group_ids`` that are groups of the org."""
        return await _group_names(functools.partial(execute_in, self.session), org_id, group_ids)

    # ---- steps ----

    async def list_steps(self, request_id: uuid.UUID) -> list[StepRecord]:
        """The chain in order: rows with the fields of ``ApprovalStep``."""
        return await execute_in(self.session, _STEPS_OF_REQUEST, {"request_id": request_id})

    async def steps_of(
        self, request_ids: Collection[uuid.UUID]
    ) -> dict[uuid.UUID, list[StepRecord]]:
        """``list_steps`` of many requests in one query (those without steps are left out)."""
        if not request_ids:
            return {}
        rows = await self.session.execute(
            select(*columns_of(ApprovalStep, StepRecord))
            .where(ApprovalStep.request_id.in_(list(request_ids)))
            .order_by(ApprovalStep.request_id, ApprovalStep.step_order)
        )
        steps: dict[uuid.UUID, list[StepRecord]] = {}
        for row in rows:
            step = StepRecord(*row)
            steps.setdefault(step.request_id, []).append(step)
        return steps

    async def replace_steps(
        self, request_id: uuid.UUID, steps: Sequence[StepRecord], *, replacing: bool
    ) -> None:
        """Write ``steps`` as the request's chain; ``replacing``: it has one, deleted first.

        The inserts are queued (``queue_write``): a chain's first steps go out with the
        rest of its configuration, in one statement. The delete is not: queued writes
        see one snapshot, and the new rows may reuse the old ones' step_order values.
        SQLite, where a queued write is made at once, inserts the chain in one statement.
        """
        if replacing:
            await count_in(self.session, _DELETE_STEPS, {"request_id": request_id})
        rows = [_new_row_values(step, _INSERT_STEP) for step in steps]
        if self.writes_at_once and len(rows) > 1:
            keys = tuple(_INSERT_STEP.column_keys or ())
            await count_in(self.session, _insert_rows(_STEPS, keys, len(rows)), _rows_params(rows))
        else:
            for values in rows:
                await queue_write(self.session, _INSERT_STEP, values)
        self._chains_written[request_id] = sorted(steps, key=lambda step: step.step_order)

    def chain_written(self, request_id: uuid.UUID) -> list[StepRecord]:
        """The chain ``replace_steps`` wrote for the request in this unit of work, in step
        order: once committed, what a read of it would answer, without that read."""
        return self._chains_written[request_id]

    async def update_step(
        self,
        step_id: uuid.UUID,
        *,
        status: str,
        decided_at: datetime | None,
        decided_by: uuid.UUID | None,
        comment: str | None,
        current_approvals: int | None = None,
    ) -> None:
        counted = {"step_id": step_id, "new_current_approvals": current_approvals}
        if status == "pending" and current_approvals:
            # A group step's vote short of its quorum: counted, still pending.
            await queue_write(self.session, _COUNT_STEP, counted)
            return
        if status == "pending":  # reopened by an edit of the arguments
            await queue_write(self.session, _REOPEN_STEP, {"step_id": step_id})
            return
        values = {
            "step_id": step_id,
            "new_status": status,
            "new_decided_at": decided_at,
            "new_decided_by": decided_by,
            "new_comment": comment,
        }
        if current_approvals is not None:  # a group step: its quorum reached
            await queue_write(self.session, _DECIDE_GROUP_STEP, values | counted)
            return
        await queue_write(self.session, _DECIDE_STEP, values)

    async def org_user_ids(
        self, org_id: uuid.UUID, user_ids: set[uuid.UUID]
    ) -> frozenset[uuid.UUID]:
        if not user_ids:  # a chain of groups names nobody
            return frozenset()
        query, params = _org_users_query(org_id, user_ids)
        rows = await execute_in(self.session, query, params)
        return frozenset(row.id for row in rows)

    # ---- comments and events ----

    async def add_comment(self, comment: Comment) -> None:
        self.session.add(comment)
        await self.session.execute(
            update(ApprovalRequest)
            .where(ApprovalRequest.id == comment.request_id)
            .values(comments_count=ApprovalRequest.comments_count + 1)
            .execution_options(synchronize_session=False)
        )

    async def list_comments(self, request_id: uuid.UUID) -> Sequence[Comment]:
        result = await self.session.scalars(
            select(Comment)
            .where(Comment.request_id == request_id)
            .order_by(Comment.created_at, Comment.id)
        )
        return result.all()

    async def add_event(self, event: AuditEvent | NewEvent) -> None:
        """Written at once with a prepared insert: every create and decision writes one,
        and the ORM's unit-of-work flush cost more than the insert itself (``make bench``,
        scenarios create and decide)."""
        values = _new_row_values(event, _INSERT_EVENT)
        values["data"] = event.data if event.data is not None else {}
        await queue_write(self.session, _INSERT_EVENT, values)

    async def add_events(self, events: Sequence[NewEvent]) -> None:
        """``add_event`` for many events, in one statement."""
        if not events:
            return
        rows = []
        for item in events:
            values = _new_row_values(item, _INSERT_EVENT)
            values["data"] = item.data if item.data is not None else {}
            rows.append(values)
        await self.session.execute(insert(_AUDIT_EVENTS), rows)

    async def list_events(self, request_id: uuid.UUID) -> Sequence[AuditEvent]:
        result = await self.session.scalars(
            select(AuditEvent)
            .where(AuditEvent.request_id == request_id)
            .order_by(AuditEvent.created_at, AuditEvent.id)
        )
        return result.all()

    async def action_types_in_use(self, org_id: uuid.UUID) -> Sequence[str]:
        """The org's distinct action types, in order: read from the index on
        (org_id, action_type, created_at), never from the table's rows."""
        result = await self.session.scalars(
            select(ApprovalRequest.action_type)
            .where(ApprovalRequest.org_id == org_id, ApprovalRequest.action_type.is_not(None))
            .distinct()
            .order_by(ApprovalRequest.action_type)
        )
        return [value for value in result.all() if value is not None]

    async def flush(self) -> None:
        """Write what this transaction holds back: the ORM's pending objects, and the
        queued writes (``queue_write``), so that what follows reads them."""
        if has_unflushed_changes(self.session):
            await self.session.flush()
        await send_queued_writes(self.session)

    # ---- the requests notifications tell of (``notifications/``) ----

    async def notified_requests(self, request_ids: Collection[uuid.UUID]) -> Sequence[Row[Any]]:
        """The requests' ``NOTIFIED_COLUMNS``, as they are now (not locked:
        ``share_lock_pending``)."""
        rows = await self.session.execute(
            select(*NOTIFIED_COLUMNS).where(ApprovalRequest.id.in_(list(request_ids)))
        )
        return rows.all()

    async def share_lock_pending(self, request_ids: Collection[uuid.UUID]) -> set[uuid.UUID]:
        """Those of the requests still pending, share-locked until the transaction commits
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
    ) -> dict[tuple[uuid.UUID, uuid.UUID], tuple[uuid.UUID, ...]]:
        """Who every step still waiting is waiting for, keyed by (request, the step's
        approver or group): the approver; a group's active members who have not voted it."""
        if not request_ids:
            return {}
        rows = (
            await self.session.execute(
                select(
                    ApprovalStep.id,
                    ApprovalStep.request_id,
                    ApprovalStep.approver_id,
                    ApprovalStep.group_id,
                ).where(
                    ApprovalStep.request_id.in_(list(request_ids)),
                    ApprovalStep.status == "pending",
                )
            )
        ).all()
        return await self._approvers_of(rows)

    async def _approvers_of(
        self, rows: Sequence[Any]
    ) -> dict[tuple[uuid.UUID, uuid.UUID], tuple[uuid.UUID, ...]]:
        """``pending_step_approvers`` of the pending steps read already (``rows``: each
        with its ``id``, ``request_id``, ``approver_id`` and ``group_id``)."""
        waiting: dict[tuple[uuid.UUID, uuid.UUID], tuple[uuid.UUID, ...]] = {
            (r.request_id, r.approver_id): (r.approver_id,) for r in rows if r.approver_id
        }
        group_steps = [r for r in rows if r.group_id is not None]
        if not group_steps:
            return waiting
        members = await self.session.execute(
            select(GroupMember.group_id, GroupMember.user_id)
            .join(User, User.id == GroupMember.user_id)
            .where(
                GroupMember.group_id.in_({r.group_id for r in group_steps}),
                User.deactivated_at.is_(None),
            )
        )
        by_group: dict[uuid.UUID, list[uuid.UUID]] = {}
        for group_id, user_id in members:
            by_group.setdefault(group_id, []).append(user_id)
        # A member a delegate voted for has voted (out of office).
        voted = await self.session.execute(
            select(Vote.step_id, func.coalesce(Vote.on_behalf_of, Vote.user_id)).where(
                Vote.step_id.in_([r.id for r in group_steps])
            )
        )
        done = set(voted.tuples())
        for r in group_steps:
            left = tuple(u for u in by_group.get(r.group_id, ()) if (r.id, u) not in done)
            waiting[(r.request_id, r.group_id)] = left
        return waiting

    async def open_step_voters(
        self, request_ids: Collection[uuid.UUID]
    ) -> dict[uuid.UUID, frozenset[uuid.UUID]]:
        """Who may vote each chain now and has not: the approvers, and the group members
        who have not voted, of its open steps (a sequential chain's first pending step,
        every pending step of a parallel one). A request without a pending step (a
        count-based one) is left out."""
        if not request_ids:
            return {}
        rows = (
            await self.session.execute(
                select(
                    ApprovalStep.id,
                    ApprovalStep.request_id,
                    ApprovalStep.approver_id,
                    ApprovalStep.group_id,
                    ApprovalStep.step_order,
                    ApprovalRequest.is_sequential,
                )
                .join(ApprovalRequest, ApprovalRequest.id == ApprovalStep.request_id)
                .where(
                    ApprovalStep.request_id.in_(list(request_ids)),
                    ApprovalStep.status == "pending",
                )
            )
        ).all()
        first: dict[uuid.UUID, int] = {}
        for r in rows:
            first[r.request_id] = min(first.get(r.request_id, r.step_order), r.step_order)
        waiting = await self._approvers_of(rows)  # the steps read once, here
        found: dict[uuid.UUID, set[uuid.UUID]] = {}
        for r in rows:
            voters = found.setdefault(r.request_id, set())
            if r.is_sequential and r.step_order != first[r.request_id]:
                continue  # not open yet: its voters are told when it opens
            voters.update(waiting.get((r.request_id, r.approver_id or r.group_id), ()))
        return {request_id: frozenset(users) for request_id, users in found.items()}

    async def org_of_request(self, request_id: uuid.UUID) -> uuid.UUID | None:
        return await self.session.scalar(
            select(ApprovalRequest.org_id).where(ApprovalRequest.id == request_id)
        )

    async def find_in_org(self, org_id: uuid.UUID, request_id: uuid.UUID) -> ApprovalRequest | None:
        """The request as an entity (a link's page shows what became of it)."""
        return await self.session.scalar(
            select(ApprovalRequest).where(
                ApprovalRequest.id == request_id, ApprovalRequest.org_id == org_id
            )
        )


# The columns a notification tells of its request (read by
# ``notifications/routing/document.facts_of``), and its status, labelled as the entity's
# attributes.
NOTIFIED_COLUMNS = (
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
    ApprovalRequest.preview,
    ApprovalRequest.status.label("status"),
    ApprovalRequest.passkey_required,
)


def with_notified_request(query: Select[Any], request_id: Any) -> Select[Any]:
    """``query`` with the ``NOTIFIED_COLUMNS`` of the request whose id is ``request_id`` (a
    column of the query's table), joined: the sender reads its claimed rows and their
    requests in one statement."""
    return query.add_columns(*NOTIFIED_COLUMNS).join(
        ApprovalRequest, ApprovalRequest.id == request_id
    )


def _new_row_values(item: object, insert: PreparedQuery) -> dict[str, Any]:
    """The values of ``insert``'s columns, read from ``item`` (an entity or a ``New…``
    value), with the id and creation time it has not been given yet."""
    values = {column: getattr(item, column) for column in insert.column_keys or ()}
    values["id"] = values["id"] or new_id()
    values["created_at"] = values["created_at"] or utcnow()
    return values
