"""Every query on approval requests, votes, comments and audit events."""

from __future__ import annotations

import functools
import operator
import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from types import SimpleNamespace
from typing import Any

from sqlalchemy import (
    BindParameter,
    ColumnElement,
    Integer,
    Select,
    String,
    Table,
    Uuid,
    and_,
    bindparam,
    column,
    delete,
    exists,
    func,
    insert,
    literal_column,
    or_,
    select,
    table,
    union_all,
    update,
)
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import aliased
from sqlalchemy.orm.attributes import set_committed_value
from sqlalchemy.sql.selectable import NamedFromClause

from signoff.approvals.rendered import is_past_expiry as _is_past_expiry
from signoff.approvals.rendered import request_json
from signoff.common.ids import new_id
from signoff.common.time import utcnow
from signoff.db import insert_ignoring_conflicts
from signoff.models import ApprovalRequest, ApprovalStep, AuditEvent, Comment, User, Vote
from signoff.prepared import (
    PreparedQuery,
    QueryRunner,
    SQLiteIndex,
    count_in,
    entity_columns,
    execute_in,
    has_unflushed_changes,
)

_SEARCH_TERM = re.compile(r"[^\W_]+", re.UNICODE)
MAX_SEARCH_TERMS = 16
# The SQLite FTS5 table of migration 0001.
_FTS = table("approval_requests_fts", column("request_id"))
# bm25 weights of its columns (title, description): a title match outranks a description
# match, as the A and B weights of the PostgreSQL vector make it there.
_FTS_COLUMN_WEIGHTS = (10.0, 1.0)

# The reads of every get and decide: built once, since building a statement (and its cache
# key) costs more than SQLite takes to answer it (docs/performance.md).
_GET = select(ApprovalRequest).where(
    ApprovalRequest.id == bindparam("request_id"), ApprovalRequest.org_id == bindparam("org_id")
)
_REQUEST_FOR_UPDATE = PreparedQuery(
    select(*entity_columns(ApprovalRequest))
    .where(
        ApprovalRequest.id == bindparam("request_id"),
        ApprovalRequest.org_id == bindparam("org_id"),
    )
    .with_for_update()
)


class LockedRequest(SimpleNamespace):
    """A request as read under its lock in a write transaction: the fields of
    ``ApprovalRequest``, changed in place as the transaction writes them (``show_written``).

    Not an ORM entity: building and tracking one cost a decision more than its statements,
    and nothing here is written through the ORM's unit of work."""


# What services and presenters read a request from: an ORM entity (reads in a session,
# the sweep's batch) or a LockedRequest (writers). The rows of prepared reads and of a
# new request (``ApprovalReads``, ``insert_unless_key_taken``) have the same fields.
RequestRecord = ApprovalRequest | LockedRequest


# What a new request is created with: every column service.create_request sets.
NEW_REQUEST_COLUMNS = (
    "id", "org_id", "connection_id", "title", "description", "status", "priority",
    "action_type", "source", "metadata", "callback_url", "callback_headers_encrypted",
    "required_approvals", "current_approvals", "is_sequential", "idempotency_key",
    "expires_at", "created_at", "updated_at", "comments_count", "has_steps",
)  # fmt: skip


def _insert_request(dialect: str) -> PreparedQuery:
    table: Table = ApprovalRequest.__table__  # type: ignore[assignment]
    insert = insert_ignoring_conflicts(dialect, table, ("org_id", "idempotency_key"))
    return PreparedQuery(insert, column_keys=NEW_REQUEST_COLUMNS)


_INSERT_REQUEST = {dialect: _insert_request(dialect) for dialect in ("sqlite", "postgresql")}
_ATTRIBUTE_OF_COLUMN = {"metadata": "metadata_"}
_AUDIT_EVENTS: Table = AuditEvent.__table__  # type: ignore[assignment]
_INSERT_EVENT = PreparedQuery(
    insert(_AUDIT_EVENTS),
    column_keys=("id", "org_id", "request_id", "type", "actor_id", "data", "created_at"),
)


# SQLite only (migration 0005): each org's number of requests, kept by triggers.
_REQUEST_COUNTS = table(
    "approval_request_counts", column("org_id", Uuid()), column("total", Integer())
)
_UNFILTERED_TOTAL = PreparedQuery(
    select(_REQUEST_COUNTS.c.total).where(_REQUEST_COUNTS.c.org_id == bindparam("org_id"))
)

# A decision's writes and reads, run by every decide (prepared.py).
_INSERT_VOTE = PreparedQuery(
    insert(Vote),
    column_keys=("id", "request_id", "step_id", "user_id", "decision", "comment", "created_at"),
)
_COUNT_BASED_VOTERS = PreparedQuery(
    select(Vote.user_id).where(Vote.request_id == bindparam("request_id"), Vote.step_id.is_(None))
)

_REQUEST_BY_ID = PreparedQuery(
    select(*entity_columns(ApprovalRequest)).where(
        ApprovalRequest.id == bindparam("request_id"),
        ApprovalRequest.org_id == bindparam("org_id"),
    )
)
_STEPS_OF_REQUEST = PreparedQuery(
    select(*entity_columns(ApprovalStep))
    .where(ApprovalStep.request_id == bindparam("request_id"))
    .order_by(ApprovalStep.step_order)
)
_STEP_BY_ID = PreparedQuery(
    select(*entity_columns(ApprovalStep)).where(
        ApprovalStep.id == bindparam("step_id"), ApprovalStep.request_id == bindparam("request_id")
    )
)
# On the table, not the entity: through a session on PostgreSQL, the ORM's bulk forms of
# these statements answer no row count.
_STEPS: Table = ApprovalStep.__table__  # type: ignore[assignment]
_DELETE_STEPS = PreparedQuery(delete(_STEPS).where(_STEPS.c.request_id == bindparam("request_id")))
_INSERT_STEP = PreparedQuery(
    insert(_STEPS),
    column_keys=(
        "id", "request_id", "step_order", "approver_id", "status", "decided_at", "decided_by",
        "comment", "created_at",
    ),
)  # fmt: skip
# A step's vote: only while the step is pending, like a request's compare-and-set.
_DECIDE_STEP = PreparedQuery(
    update(_STEPS)
    .where(_STEPS.c.id == bindparam("step_id"), _STEPS.c.status == "pending")
    .values(
        status=bindparam("new_status"),
        decided_at=bindparam("new_decided_at"),
        decided_by=bindparam("new_decided_by"),
        comment=bindparam("new_comment"),
    )
)
_ANY_VOTE = PreparedQuery(
    select(Vote.id).where(Vote.request_id == bindparam("request_id")).limit(1)
)
_VOTES_ON_REQUEST = PreparedQuery(
    select(*entity_columns(Vote))
    .where(Vote.request_id == bindparam("request_id"))
    .order_by(Vote.created_at, Vote.id)
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
def _update_if_pending(columns: frozenset[str]) -> PreparedQuery:
    """The compare-and-set of a transition that sets ``columns`` (one of a few sets)."""
    return PreparedQuery(
        update(ApprovalRequest)
        .where(ApprovalRequest.id == bindparam("request_id"), ApprovalRequest.status == "pending")
        .values({column: bindparam(f"new_{column}") for column in sorted(columns)})
        .execution_options(synchronize_session=False)
    )


class ApprovalReads:
    """The reads of a get, as prepared queries outside any session (prepared.py).

    Rows have the fields of the ORM entities, so services and presenters take either.
    Each query reads the latest committed state on its own: a read that must see one
    snapshot with a write, or lock, uses ``ApprovalRepository`` in a transaction instead.
    """

    def __init__(self, queries: QueryRunner) -> None:
        self.queries = queries

    async def get(self, org_id: uuid.UUID, request_id: uuid.UUID) -> Any | None:
        return await self.queries.one(_REQUEST_BY_ID, {"request_id": request_id, "org_id": org_id})

    async def list_steps(self, request_id: uuid.UUID) -> Sequence[Any]:
        return await self.queries.all(_STEPS_OF_REQUEST, {"request_id": request_id})

    async def list_votes(self, request_id: uuid.UUID) -> Sequence[Any]:
        return await self.queries.all(_VOTES_ON_REQUEST, {"request_id": request_id})

    async def list_page(
        self,
        org_id: uuid.UUID,
        filters: ListFilters,
        *,
        now: datetime,
        offset: int,
        limit: int,
    ) -> tuple[list[str], int]:
        """A page of requests, each rendered as its JSON object by the database
        (``rendered.py``), and the total; both read in one transaction."""
        params: dict[str, Any] = {"org_id": org_id, "now": now, "offset": offset, "limit": limit}
        params.update(
            (name, getattr(filters, name))
            for name in _VALUE_FILTERS
            if getattr(filters, name) is not None
        )
        if filters.search is not None:
            terms = search_terms(filters.search)
            if not terms:
                return [], 0
            params["search_query"] = _search_query(self.queries.dialect_name, terms)
        queries = _page_queries(
            self.queries.dialect_name,
            tuple(sorted(set(filters.statuses or ()))),
            frozenset(name for name in _VALUE_FILTERS if name in params),
            filters.search is not None,
        )
        if queries.page_of_few is None:
            rows, totals = await self.queries.all_in_one_read(
                (queries.page, params), (queries.count, params)
            )
            return [row.json for row in rows], _total(totals)

        def page_for(counted: list[list[Any]]) -> list[tuple[PreparedQuery, Mapping[str, Any]]]:
            matches, org_total = _total(counted[0]), _total(counted[1])
            return [(queries.page_for(matches, org_total, offset + limit), params)]

        totals, _, rows = await self.queries.all_in_one_read_then(
            [(queries.count, params), (_UNFILTERED_TOTAL, params)], page_for
        )
        return [row.json for row in rows], _total(totals)


def _total(rows: Sequence[Any]) -> int:
    return int(rows[0].total) if rows else 0


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


@dataclass(frozen=True)
class ListFilters:
    statuses: Sequence[str] | None = None
    priority: str | None = None
    action_type: str | None = None
    source: str | None = None
    search: str | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None
    decided_after: datetime | None = None
    decided_before: datetime | None = None
    assigned_to: uuid.UUID | None = None


def search_terms(text_query: str) -> list[str]:
    """Words of a search box, stripped of every operator of either engine's query syntax."""
    return [t.lower() for t in _SEARCH_TERM.findall(text_query)][:MAX_SEARCH_TERMS]


class ApprovalRepository:
    def __init__(self, session: AsyncSession, dialect: str) -> None:
        self.session = session
        self.dialect = dialect

    # ---- requests ----

    async def insert_unless_key_taken(self, values: dict[str, Any]) -> Any | None:
        """Insert a request; the row as written (the fields of ``ApprovalRequest``), or None
        if its idempotency key is already taken in the org.

        ``ON CONFLICT DO NOTHING`` against the unique (org_id, idempotency_key) constraint:
        of concurrent creates with one key exactly one inserts, on both databases.
        """
        if not await count_in(self.session, _INSERT_REQUEST[self.dialect], values):
            return None
        # The new row is what was written: the columns a new request leaves empty are
        # NULL, and the values read back as written (UTC timestamps, the same JSON).
        row = dict.fromkeys(_REQUEST_BY_ID.keys)
        row.update((_ATTRIBUTE_OF_COLUMN.get(key, key), value) for key, value in values.items())
        return _REQUEST_BY_ID.row_type(**row)

    async def find_by_idempotency_key(self, org_id: uuid.UUID, key: str) -> ApprovalRequest | None:
        return await self.session.scalar(
            select(ApprovalRequest).where(
                ApprovalRequest.org_id == org_id, ApprovalRequest.idempotency_key == key
            )
        )

    async def get(self, org_id: uuid.UUID, request_id: uuid.UUID) -> ApprovalRequest | None:
        return await self.session.scalar(_GET, {"request_id": request_id, "org_id": org_id})

    async def get_locked(self, org_id: uuid.UUID, request_id: uuid.UUID) -> LockedRequest | None:
        """The request, locked for this transaction (``FOR UPDATE`` on PostgreSQL; on
        SQLite the transaction holds the write lock already): where every writer of a
        request starts from."""
        params = {"request_id": request_id, "org_id": org_id}
        rows = await execute_in(self.session, _REQUEST_FOR_UPDATE, params)
        return LockedRequest(**rows[0]._asdict()) if rows else None

    async def update_if_pending(self, request_id: uuid.UUID, values: dict[str, Any]) -> bool:
        """Compare-and-set: change a request only while it is still pending."""
        statement = _update_if_pending(frozenset(values))
        params = {f"new_{column}": value for column, value in values.items()}
        return await count_in(self.session, statement, {**params, "request_id": request_id}) == 1

    @staticmethod
    def show_written(row: RequestRecord, values: dict[str, Any]) -> None:
        """Make ``row`` show what an update here wrote, without the ORM writing it again."""
        for key, value in values.items():
            if isinstance(row, ApprovalRequest):
                set_committed_value(row, key, value)
            else:
                setattr(row, key, value)

    async def due_for_expiry(self, now: datetime, limit: int) -> Sequence[ApprovalRequest]:
        """Pending requests past their deadline, oldest deadline first, locked for us.

        SKIP LOCKED lets several workers sweep at once on PostgreSQL without waiting on or
        double-processing each other's rows.
        """
        statement = (
            select(ApprovalRequest)
            .where(
                ApprovalRequest.status == "pending",
                ApprovalRequest.expires_at.is_not(None),
                ApprovalRequest.expires_at <= now,
            )
            .order_by(ApprovalRequest.expires_at)
            .limit(limit)
            .with_for_update(skip_locked=True)
        )
        return (await self.session.scalars(statement)).all()

    async def pending_ids(self, org_id: uuid.UUID) -> Sequence[uuid.UUID]:
        result = await self.session.scalars(
            select(ApprovalRequest.id).where(
                ApprovalRequest.org_id == org_id, ApprovalRequest.status == "pending"
            )
        )
        return result.all()

    # ---- votes ----

    async def count_based_voters(self, request_id: uuid.UUID) -> frozenset[uuid.UUID]:
        rows = await execute_in(self.session, _COUNT_BASED_VOTERS, {"request_id": request_id})
        return frozenset(row.user_id for row in rows)

    async def add_vote(self, vote: Vote | NewVote) -> None:
        await execute_in(self.session, _INSERT_VOTE, _new_row_values(vote, _INSERT_VOTE))

    async def has_votes(self, request_id: uuid.UUID) -> bool:
        return bool(await execute_in(self.session, _ANY_VOTE, {"request_id": request_id}))

    async def list_votes(self, request_id: uuid.UUID) -> Sequence[Vote]:
        result = await self.session.scalars(
            select(Vote).where(Vote.request_id == request_id).order_by(Vote.created_at, Vote.id)
        )
        return result.all()

    # ---- steps ----

    async def list_steps(self, request_id: uuid.UUID) -> Sequence[Any]:
        """The chain in order: rows with the fields of ``ApprovalStep``."""
        return await execute_in(self.session, _STEPS_OF_REQUEST, {"request_id": request_id})

    async def get_step(self, request_id: uuid.UUID, step_id: uuid.UUID) -> Any | None:
        rows = await execute_in(
            self.session, _STEP_BY_ID, {"request_id": request_id, "step_id": step_id}
        )
        return rows[0] if rows else None

    async def replace_steps(self, request_id: uuid.UUID, steps: Sequence[ApprovalStep]) -> None:
        """Delete the chain and write ``steps`` (new, not in the session) in its place."""
        # In this order: the new rows may reuse the old ones' step_order values.
        await count_in(self.session, _DELETE_STEPS, {"request_id": request_id})
        for step in steps:
            await count_in(self.session, _INSERT_STEP, _new_row_values(step, _INSERT_STEP))

    async def update_step(
        self,
        step_id: uuid.UUID,
        *,
        status: str,
        decided_at: datetime,
        decided_by: uuid.UUID | None,
        comment: str | None,
    ) -> None:
        values = {
            "step_id": step_id,
            "new_status": status,
            "new_decided_at": decided_at,
            "new_decided_by": decided_by,
            "new_comment": comment,
        }
        await count_in(self.session, _DECIDE_STEP, values)

    async def org_user_ids(
        self, org_id: uuid.UUID, user_ids: set[uuid.UUID]
    ) -> frozenset[uuid.UUID]:
        params: dict[str, Any] = {f"user_{i}": user_id for i, user_id in enumerate(user_ids)}
        params["org_id"] = org_id
        rows = await execute_in(self.session, _org_users_among(len(user_ids)), params)
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
        and the ORM's unit-of-work flush cost three times the insert (docs/performance.md)."""
        values = _new_row_values(event, _INSERT_EVENT)
        values["data"] = event.data if event.data is not None else {}
        await execute_in(self.session, _INSERT_EVENT, values)

    async def list_events(self, request_id: uuid.UUID) -> Sequence[AuditEvent]:
        result = await self.session.scalars(
            select(AuditEvent)
            .where(AuditEvent.request_id == request_id)
            .order_by(AuditEvent.created_at, AuditEvent.id)
        )
        return result.all()

    async def flush(self) -> None:
        if has_unflushed_changes(self.session):
            await self.session.flush()


# List filters compared with a value of their own, passed as a parameter of that name.
_VALUE_FILTERS = (
    "priority",
    "action_type",
    "source",
    "created_after",
    "created_before",
    "decided_after",
    "decided_before",
    "assigned_to",
)


@dataclass(frozen=True)
class ListQueries:
    """A list page's queries: its rows (one field, ``json``) and its total.

    On SQLite, a filter that is an OR of two sets of rows (a decided window, ``expired``,
    several statuses) has no index that gives the list order, and the page can be read two
    ways: by walking the org's history newest first (``page``) or by sorting the rows the
    filter chose through indexes (``page_of_few``). ``page_for`` picks one once the total
    is known.
    """

    page: PreparedQuery
    count: PreparedQuery
    page_of_few: PreparedQuery | None = None

    def page_for(self, matches: int, org_total: int, reach: int) -> PreparedQuery:
        """The cheaper page for ``matches`` of ``org_total`` requests, of which the page
        skips and shows ``reach``: the walk reads at most every request that does not
        match, plus the reach; the sort reads every match. Each bound holds however the
        matches lie in time."""
        if self.page_of_few is None or org_total - matches + reach < matches:
            return self.page
        return self.page_of_few

    def every(self) -> list[PreparedQuery]:
        return [self.page, self.count, *([self.page_of_few] if self.page_of_few else [])]


@functools.lru_cache(maxsize=256)
def _page_queries(
    dialect: str, statuses: tuple[str, ...], filters: frozenset[str], search: bool
) -> ListQueries:
    """A list page's queries, prepared once per shape of filters: the values are all
    parameters."""
    conditions = [ApprovalRequest.org_id == bindparam("org_id"), *_conditions(statuses, filters)]
    count_query = select(func.count().label("total")).select_from(ApprovalRequest)
    if search:
        count_query, _ = _with_search(dialect, count_query)
    if dialect == "postgresql":
        page = PreparedQuery(_page_rendered_after_choosing(conditions, search))
        return ListQueries(page, PreparedQuery(count_query.where(*conditions)))
    # SQLite renders only the rows it returns: the rows OFFSET skips cost a step each,
    # unless they go through a sorter (``_sqlite_page_by_rowids``).
    rows_query = select(request_json(dialect).label("json"))
    if len(conditions) == 1 and not search:
        # The org's whole count, kept by triggers (migration 0005): an unfiltered page
        # need not count the org's history.
        return ListQueries(_page_of(rows_query, conditions, search), _UNFILTERED_TOTAL)
    if search:
        return ListQueries(
            _page_of(rows_query, conditions, search), PreparedQuery(count_query.where(*conditions))
        )
    row_sets = _sqlite_row_sets(statuses, filters)
    if row_sets:
        chosen = [
            ApprovalRequest.org_id == bindparam("org_id"),
            *_conditions(statuses, filters, rowid_sets=True),
        ]
        by_rowid = [
            SQLiteIndex("approval_requests", None),
            *(_ROW_SET_INDEX[alias.name] for sets in row_sets for alias, _ in sets),
        ]
        # With nothing else to filter by (``chosen``: the org, and the one set), the
        # set's rows are counted in their indexes alone.
        only_sets = len(row_sets) == 1 and len(chosen) == 2
        return ListQueries(
            page=_page_of(rows_query, conditions, search, [_ORG_CREATED_INDEX]),
            count=_count_of(row_sets[0])
            if only_sets
            else PreparedQuery(count_query.where(*chosen), sqlite_indexes=by_rowid),
            page_of_few=_sqlite_page_by_rowids(chosen, by_rowid),
        )
    index = _sqlite_filter_index(statuses, filters)
    return ListQueries(
        _sqlite_page_by_rowids(conditions, index)
        if index
        else _page_of(rows_query, conditions, search),
        PreparedQuery(count_query.where(*conditions), sqlite_indexes=index),
    )


def _page_of(
    rows_query: Select[Any],
    conditions: list[ColumnElement[bool]],
    search: bool,
    indexes: Sequence[SQLiteIndex] = (),
) -> PreparedQuery:
    return PreparedQuery(
        _one_page("sqlite", rows_query, conditions, search)[0], sqlite_indexes=indexes
    )


def _sqlite_page_by_rowids(
    conditions: list[ColumnElement[bool]], indexes: Sequence[SQLiteIndex]
) -> PreparedQuery:
    """The page's rowids chosen and sorted, then only its rows rendered: SQLite computes
    the select list of every row that goes through a sorter, the rows OFFSET skips
    included, and rendering one cost 8 µs (220 ms to sort a window of 27,000 requests,
    4 ms to skip 500 of a priority), against 0.6 µs to sort its rowid."""
    chosen: Select[Any] = (
        select(literal_column("approval_requests.rowid"))
        .where(*conditions)
        .order_by(ApprovalRequest.created_at.desc(), ApprovalRequest.id.desc())
        .offset(bindparam("offset"))
        .limit(bindparam("limit"))
    )
    page = select(request_json("sqlite", _PAGE).label("json")).where(
        literal_column("page.rowid").in_(chosen)
    )
    return PreparedQuery(
        page.order_by(_PAGE.c.created_at.desc(), _PAGE.c.id.desc()), sqlite_indexes=indexes
    )


def _sqlite_filter_index(statuses: tuple[str, ...], filters: frozenset[str]) -> list[SQLiteIndex]:
    """The index SQLite must read a filtered page through, where its planner errs.

    Why: SQLite's planner keeps no statistics here (and ANALYZE's averages would not
    help: it cannot know that a value is rare), so it prefers the index that gives the
    list order without a sort, ``..._org_created``, and tests every row of the org's
    history, newest first, against the filter. A page of a rare value then read the whole
    history: 70 ms for ``status=approved`` among 27,000 pending requests. Read through the
    filter's own index, a page reads only matching rows, newest first (only rows that
    share a ``created_at`` are sorted, for the ``id`` that breaks the tie), and stops at
    the page's end: 0.3 ms there, and no more when most requests match.

    The first that applies of: action type, source, one decided status, priority, pending
    (or an approver's inbox, which is pending requests): pending comes last, as most of
    an org's recent requests may be pending. Filters that are an OR of two sets of rows
    go by ``ListQueries`` instead (tests/test_list_plans.py).
    """
    if "action_type" in filters:
        return [_REQUEST_INDEX["action_type"]]
    if "source" in filters:
        return [_REQUEST_INDEX["source"]]
    if len(statuses) == 1 and statuses[0] not in ("pending", "expired"):
        return [_REQUEST_INDEX["status"]]
    if "priority" in filters:
        return [_REQUEST_INDEX["priority"]]
    if statuses == ("pending",) or "assigned_to" in filters:
        return [_REQUEST_INDEX["status"]]
    return []


_REQUEST_INDEX = {
    column: SQLiteIndex("approval_requests", f"ix_approval_requests_org_{column}_created")
    for column in ("action_type", "source", "status", "priority")
}
_ORG_CREATED_INDEX = SQLiteIndex("approval_requests", "ix_approval_requests_org_created")
# The requests table again: the page rendered from rowids, and the subqueries that
# choose rowids for a page.
_PAGE = ApprovalRequest.__table__.alias("page")
_DECIDED = ApprovalRequest.__table__.alias("decided")
_EXPIRING = ApprovalRequest.__table__.alias("expiring")
_BY_STATUS = ApprovalRequest.__table__.alias("by_status")
_OVERDUE = ApprovalRequest.__table__.alias("overdue")
# The index each alias reads its rows through: SQLite's planner would walk the org's
# history by ``org_id`` instead.
_ROW_SET_INDEX = {
    alias.name: SQLiteIndex(f"approval_requests AS {alias.name}", index)
    for alias, index in (
        (_DECIDED, "ix_approval_requests_org_decided"),
        (_EXPIRING, "ix_approval_requests_pending_expiry"),
        (_BY_STATUS, "ix_approval_requests_org_status_created"),
        (_OVERDUE, "ix_approval_requests_pending_expiry"),
    )
}


def _sqlite_row_sets(statuses: tuple[str, ...], filters: frozenset[str]) -> list[list[_RowSet]]:
    """The filters that are an OR of two sets of rows, for which no index gives the list
    order (``ListQueries``): a decided window, a status set of ``_sqlite_status_set``."""
    row_sets = []
    if "decided_after" in filters or "decided_before" in filters:
        row_sets.append(_sqlite_decided_window(filters))
    if _reads_statuses_by_rowid(statuses):
        row_sets.append(_sqlite_status_set(statuses))
    return row_sets


def _one_page(
    dialect: str, query: Select[Any], conditions: list[ColumnElement[bool]], search: bool
) -> tuple[Select[Any], ColumnElement[Any] | None]:
    """``query`` narrowed to the matching requests, in list order (best match first when
    searching, then newest first), one page of them; and the search rank, if any."""
    order: list[Any] = [ApprovalRequest.created_at.desc(), ApprovalRequest.id.desc()]
    rank = None
    if search:
        query, rank = _with_search(dialect, query)
        order = [rank, *order]
    page = (
        query.where(*conditions)
        .order_by(*order)
        .offset(bindparam("offset"))
        .limit(bindparam("limit"))
    )
    return page, rank


def _page_rendered_after_choosing(
    conditions: list[ColumnElement[bool]], search: bool
) -> Select[Any]:
    """PostgreSQL's page query: the page's rows are chosen in a subquery, and only they are
    rendered. Why: PostgreSQL evaluates the select list for every row that OFFSET then
    skips; rendering in the same query made page 25 render 500 objects to answer 20
    (11.6 ms on a database of 3,000 requests, against 1 ms for the count)."""
    columns = select(*ApprovalRequest.__table__.columns)
    chosen, rank = _one_page("postgresql", columns, conditions, search)
    if rank is not None:
        # The rank (ts_rank(...) DESC) travels with the rows, to order the page again.
        chosen = chosen.add_columns(rank.element.label("rank"))
    page = chosen.subquery("page")
    outer_order: list[Any] = [page.c.created_at.desc(), page.c.id.desc()]
    if rank is not None:
        outer_order = [page.c.rank.desc(), *outer_order]
    return select(request_json("postgresql", page).label("json")).order_by(*outer_order)


def _conditions(
    statuses: tuple[str, ...], filters: frozenset[str], *, rowid_sets: bool = False
) -> list[ColumnElement[bool]]:
    """The filters' conditions. ``rowid_sets`` (SQLite): those that are an OR of two sets
    of rows as the rowids of those sets, each chosen through an index; they choose the
    same requests (``_sqlite_decided_window``, ``_sqlite_status_set``)."""
    conditions: list[ColumnElement[bool]] = []
    if rowid_sets and _reads_statuses_by_rowid(statuses):
        conditions.append(_rowids_in(_sqlite_status_set(statuses)))
    elif statuses:
        conditions.append(or_(*(_status_condition(status) for status in statuses)))
    for name in ("priority", "action_type", "source"):
        if name in filters:
            conditions.append(getattr(ApprovalRequest, name) == bindparam(name))
    if "created_after" in filters:
        conditions.append(ApprovalRequest.created_at >= bindparam("created_after"))
    if "created_before" in filters:
        conditions.append(ApprovalRequest.created_at < bindparam("created_before"))
    if rowid_sets and ("decided_after" in filters or "decided_before" in filters):
        conditions.append(_rowids_in(_sqlite_decided_window(filters)))
    else:
        if "decided_after" in filters:
            conditions.append(_decided_at_condition(operator.ge, bindparam("decided_after")))
        if "decided_before" in filters:
            conditions.append(_decided_at_condition(operator.lt, bindparam("decided_before")))
    if "assigned_to" in filters:
        conditions.append(_awaiting_vote_of(bindparam("assigned_to")))
    return conditions


def _with_search(dialect: str, query: Select[Any]) -> tuple[Select[Any], Any]:
    """Narrow ``query`` to full-text matches of the ``search_query`` parameter and give
    their ranking; both use an index.

    Every term must match, as a prefix, case-insensitively; titles weigh more than
    descriptions. PostgreSQL: the GIN-indexed ``search_vector``. SQLite: a join with the
    FTS5 table, ranked by bm25 with title and description weights (its default ``rank``
    weighs every column alike).
    """
    search_query = bindparam("search_query", type_=String())
    if dialect == "postgresql":
        tsquery = func.to_tsquery("simple", search_query)
        vector: ColumnElement[Any] = literal_column("approval_requests.search_vector")
        return query.where(vector.op("@@")(tsquery)), func.ts_rank(vector, tsquery).desc()
    joined = query.join(_FTS, _FTS.c.request_id == ApprovalRequest.id).where(
        literal_column("approval_requests_fts").op("MATCH")(search_query)
    )
    bm25 = func.bm25(literal_column("approval_requests_fts"), *_FTS_COLUMN_WEIGHTS)
    return joined, bm25.asc()  # bm25 is negative: better matches sort first


def _search_query(dialect: str, terms: list[str]) -> str:
    """The search box's words as the engine's query: each a prefix, all required."""
    if dialect == "postgresql":
        return " & ".join(f"{term}:*" for term in terms)
    return " ".join('"' + term.replace('"', '""') + '"*' for term in terms)


def _new_row_values(item: object, insert: PreparedQuery) -> dict[str, Any]:
    """The values of ``insert``'s columns, read from ``item`` (an entity or a ``New…``
    value), with the id and creation time it has not been given yet."""
    values = {column: getattr(item, column) for column in insert.column_keys or ()}
    values["id"] = values["id"] or new_id()
    values["created_at"] = values["created_at"] or utcnow()
    return values


def _decided_at_condition(
    compare: Callable[[Any, Any], ColumnElement[bool]], bound: BindParameter[Any]
) -> ColumnElement[bool]:
    """A decided_at filter that agrees with reads before the sweep has run: a pending
    request past its deadline reads as decided at its ``expires_at``."""
    return or_(
        compare(ApprovalRequest.decided_at, bound),
        and_(
            ApprovalRequest.status == "pending",
            _is_past_expiry(),
            compare(ApprovalRequest.expires_at, bound),
        ),
    )


# One set of rows of a filter that is an OR of two: the requests table under an alias,
# and the conditions that choose the set's rows through that alias's index.
_RowSet = tuple[NamedFromClause, list[ColumnElement[bool]]]


def _sqlite_decided_window(filters: frozenset[str]) -> list[_RowSet]:
    """``_decided_at_condition`` for the window's bounds as two sets SQLite can read
    through indexes: the org's requests decided in the window (by their ``decided_at``),
    and the pending ones whose deadline passed in it (by the partial index of pending
    deadlines). A pending request has no ``decided_at``, and a decided one is not pending.
    Written as the OR of the two, SQLite read the org's whole history (``ListQueries``)."""
    decided = [_DECIDED.c.org_id == bindparam("org_id"), *_window(_DECIDED.c.decided_at, filters)]
    expiring = [
        # A literal, as in the partial index's own condition: SQLite must see that it
        # holds to read through that index.
        _EXPIRING.c.status == literal_column("'pending'"),
        _is_past_expiry(_EXPIRING),
        *_window(_EXPIRING.c.expires_at, filters),
        _EXPIRING.c.org_id == bindparam("org_id"),
    ]
    return [(_DECIDED, decided), (_EXPIRING, expiring)]


def _reads_statuses_by_rowid(statuses: tuple[str, ...]) -> bool:
    """Whether SQLite reads a status filter by ``_sqlite_status_set``: several statuses, or
    expired, without pending (pending requests may be most of an org's recent ones)."""
    return "pending" not in statuses and (len(statuses) > 1 or statuses == ("expired",))


def _sqlite_status_set(statuses: tuple[str, ...]) -> list[_RowSet]:
    """The requests ``_status_condition`` chooses for ``statuses``, as sets SQLite can read
    through indexes: the org's requests stored with one of them (by the status index)
    and, for expired, the pending ones past their deadline (by the partial index of
    pending deadlines)."""
    stored = [
        _BY_STATUS.c.org_id == bindparam("org_id"),
        or_(*(_BY_STATUS.c.status == status for status in statuses)),
    ]
    if "expired" not in statuses:
        return [(_BY_STATUS, stored)]
    overdue = [
        _OVERDUE.c.status == literal_column("'pending'"),  # a literal: see above
        _is_past_expiry(_OVERDUE),
        _OVERDUE.c.org_id == bindparam("org_id"),
    ]
    return [(_BY_STATUS, stored), (_OVERDUE, overdue)]


def _rowids_in(sets: list[_RowSet]) -> ColumnElement[bool]:
    """The page's rows are the rows of ``sets`` (disjoint)."""
    chosen: list[Select[Any]] = [
        select(literal_column(f"{alias.name}.rowid")).where(*where) for alias, where in sets
    ]
    return literal_column("approval_requests.rowid").in_(union_all(*chosen))


def _count_of(sets: list[_RowSet]) -> PreparedQuery:
    """How many rows ``sets`` (disjoint) hold, counted in their indexes alone."""
    counts = [
        select(func.count()).select_from(alias).where(*where).scalar_subquery()
        for alias, where in sets
    ]
    return PreparedQuery(
        select(functools.reduce(operator.add, counts).label("total")),
        sqlite_indexes=[_ROW_SET_INDEX[alias.name] for alias, _ in sets],
    )


def _window(moment: ColumnElement[Any], filters: frozenset[str]) -> list[ColumnElement[bool]]:
    bounds = []
    if "decided_after" in filters:
        bounds.append(moment >= bindparam("decided_after"))
    if "decided_before" in filters:
        bounds.append(moment < bindparam("decided_before"))
    return bounds


def _status_condition(status: str) -> ColumnElement[bool]:
    """A status filter that agrees with what reads show before the sweep has run."""
    if status == "pending":
        return and_(ApprovalRequest.status == "pending", ~_is_past_expiry())
    if status == "expired":
        return or_(
            ApprovalRequest.status == "expired",
            and_(ApprovalRequest.status == "pending", _is_past_expiry()),
        )
    return ApprovalRequest.status == status


def _awaiting_vote_of(user_id: BindParameter[Any]) -> ColumnElement[bool]:
    """Pending requests a user can vote on right now: the approver's inbox.

    Either a pending step of theirs that is votable now (for a sequential chain: every
    lower step approved), or a count-based request they have not voted on yet.
    """
    step, earlier = aliased(ApprovalStep), aliased(ApprovalStep)
    earlier_not_approved = exists().where(
        earlier.request_id == step.request_id,
        earlier.step_order < step.step_order,
        earlier.status != "approved",
    )
    votable_step = exists().where(
        step.request_id == ApprovalRequest.id,
        step.approver_id == user_id,
        step.status == "pending",
        or_(ApprovalRequest.is_sequential.is_(False), ~earlier_not_approved),
    )
    not_yet_voted = and_(
        ApprovalRequest.has_steps.is_(False),
        ~exists().where(
            Vote.request_id == ApprovalRequest.id, Vote.user_id == user_id, Vote.step_id.is_(None)
        ),
    )
    return and_(_status_condition("pending"), or_(votable_step, not_yet_voted))
