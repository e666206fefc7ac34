"""The inbox: the pending requests that wait for one person's vote now, most urgent
first (highest priority, then the longest waiting), and how many wait, counted up to a
cap.
"""

from __future__ import annotations

import functools
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import (
    ColumnElement,
    Integer,
    bindparam,
    func,
    literal_column,
    or_,
    select,
    union_all,
)
from sqlalchemy.sql.selectable import NamedFromClause, Subquery

from signoff.approvals.json_in_sql import NOW, request_json
from signoff.approvals.json_in_sql import is_past_expiry as _is_past_expiry
from signoff.approvals.listing.filters import votable_now
from signoff.approvals.listing.paging import PAGE, total_of
from signoff.approvals.listing.search import (
    matches_search,
    number_searched,
    search_query,
    search_terms,
)
from signoff.models import ApprovalRequest, Connection
from signoff.storage import PreparedQuery, QueryRunner, SQLiteIndex

# Most urgent first: the order of the inbox's priorities.
INBOX_PRIORITIES = ("critical", "high", "medium", "low")
# The inbox counts what waits for a person up to this many, and shows more as "1,000+":
# counting stops there, so the count costs the same whatever the backlog.
WAITING_COUNT_CAP = 1_000
# Pending requests of an org by priority, oldest first (migration 0014): each priority's
# part of the inbox is read in its order, and stops once the page is full.
_INBOX_INDEX = "ix_approval_requests_org_status_priority_created"
# Filters the inbox takes besides the priority, each compared with a parameter of its name.
INBOX_VALUE_FILTERS = ("action_type", "source")


@dataclass(frozen=True)
class InboxFilters:
    priority: str | None = None
    action_type: str | None = None
    source: str | None = None
    search: str | None = None
    # Four-eyes (the org's ``self_approval: forbid``): leave out the requests asked for
    # through the person's own connections, which they may not decide.
    hide_own: bool = False


@dataclass(frozen=True)
class Inbox:
    """A page of the inbox, and how many requests wait in all: exact up to
    ``WAITING_COUNT_CAP``; past it ``total`` is the cap and ``total_is_exact`` false."""

    rendered: list[str]
    total: int
    total_is_exact: bool


async def read_inbox(
    queries: QueryRunner,
    org_id: uuid.UUID,
    user_id: uuid.UUID,
    filters: InboxFilters,
    *,
    now: datetime,
    offset: int,
    limit: int,
) -> Inbox:
    """The pending requests of the org that ``user_id`` can vote on now and that pass
    ``filters``: highest priority first, then the longest waiting; each rendered as its
    JSON object by the database. Page and count are read in one snapshot."""
    inbox = _inbox_call(queries.dialect_name, org_id, user_id, filters, now)
    if inbox is None:
        return Inbox([], 0, True)
    queries_of, params = inbox
    page, count = queries_of
    rows, counted = await queries.snapshot_read(
        (page, {**params, "offset": offset, "limit": limit, "reach": offset + limit}),
        (count, params),
    )
    total, exact = _capped(total_of(counted))
    return Inbox([row.json for row in rows], total, exact)


async def count_waiting(
    queries: QueryRunner,
    org_id: uuid.UUID,
    user_id: uuid.UUID,
    *,
    now: datetime,
    hide_own: bool = False,
) -> tuple[int, bool]:
    """How many requests wait for ``user_id``'s vote now, exact up to
    ``WAITING_COUNT_CAP``: (the count or the cap, whether it is exact)."""
    filters = InboxFilters(hide_own=hide_own)
    inbox = _inbox_call(queries.dialect_name, org_id, user_id, filters, now)
    assert inbox is not None  # no search: always a query
    (_, count), params = inbox
    return _capped(total_of(await queries.all(count, params)))


def _capped(counted: int) -> tuple[int, bool]:
    if counted > WAITING_COUNT_CAP:
        return WAITING_COUNT_CAP, False
    return counted, True


def _inbox_call(
    dialect: str, org_id: uuid.UUID, user_id: uuid.UUID, filters: InboxFilters, now: datetime
) -> tuple[tuple[PreparedQuery, PreparedQuery], dict[str, Any]] | None:
    """The inbox's page and count queries for ``filters``, and their parameters (the
    page's own, offset, limit and reach, come with the call); None when nothing can
    match: a search with no word to look for, or a priority that is none of the four
    (which the queries name as literals)."""
    if filters.priority is not None and filters.priority not in INBOX_PRIORITIES:
        return None
    # The cap is a parameter, read at each call (tests lower it).
    params: dict[str, Any] = {
        "org_id": org_id,
        "user_id": user_id,
        "now": now,
        "count_reach": WAITING_COUNT_CAP + 1,
    }
    present = frozenset(name for name in INBOX_VALUE_FILTERS if getattr(filters, name))
    params.update((name, getattr(filters, name)) for name in present)
    searched = number_searched(filters.search)
    number: NumberTest = None
    if searched is not None:
        params["search_number"] = searched.number
        number = "only" if searched.only else "or_words"
    words = filters.search is not None and number != "only"
    if words:
        assert filters.search is not None
        terms = search_terms(filters.search)
        if not terms:
            return None
        params["search_query"] = search_query(dialect, terms, org_id)
    priorities = (filters.priority,) if filters.priority else INBOX_PRIORITIES
    return inbox_queries(dialect, priorities, present, words, number, filters.hide_own), params


# How an inbox search tests a request's number (``number_searched``): not at all, as the
# only test (``#1234``), or as a match besides the words' (``1234``).
NumberTest = Literal["only", "or_words"] | None


@functools.lru_cache(maxsize=64)
def inbox_queries(
    dialect: str,
    priorities: tuple[str, ...],
    filters: frozenset[str],
    search: bool,
    number: NumberTest = None,
    hide_own: bool = False,
) -> tuple[PreparedQuery, PreparedQuery]:
    """The inbox's page and its bounded count, prepared once per shape of filters.

    The page: for each priority, most urgent first, its pending requests are walked
    oldest first through ``_INBOX_INDEX``, each tested for "awaiting this person's vote"
    as it comes, until the page's reach (offset plus limit) is found; the parts are
    merged and only the page's rows rendered. Sorting every waiting request by an
    urgency rank instead tested every one of them, however long the backlog. The count
    walks the same pending requests and stops one past ``WAITING_COUNT_CAP``.
    """
    if not set(priorities) <= set(INBOX_PRIORITIES):
        raise ValueError(f"not priorities: {priorities}")
    parts = [
        _inbox_part(dialect, priority, filters, search, number, hide_own) for priority in priorities
    ]
    merged = (
        parts[0]
        if len(parts) == 1
        else union_all(*(select(*part.c) for part in parts)).subquery("merged")
    )
    chosen = (
        select(merged.c.id, merged.c.urgency, merged.c.created_at)
        .order_by(merged.c.urgency, merged.c.created_at, merged.c.id)
        .offset(bindparam("offset"))
        .limit(bindparam("limit"))
        .subquery("chosen")
    )
    page = (
        select(request_json(dialect, PAGE).label("json"))
        .select_from(chosen.join(PAGE, PAGE.c.id == chosen.c.id))
        .order_by(chosen.c.urgency, chosen.c.created_at, chosen.c.id)
    )
    hints = [
        SQLiteIndex(f"approval_requests AS {_inbox_alias(p)}", _INBOX_INDEX) for p in priorities
    ]
    return (
        PreparedQuery(page, sqlite_indexes=hints if dialect == "sqlite" else ()),
        _inbox_count(dialect, priorities, filters, search, number, hide_own),
    )


def _inbox_alias(priority: str) -> str:
    return f"waiting_{priority}"


def _waiting_conditions(
    dialect: str,
    rows: NamedFromClause,
    priorities: tuple[str, ...],
    filters: frozenset[str],
    search: bool,
    number: NumberTest = None,
    hide_own: bool = False,
) -> list[ColumnElement[bool]]:
    """The requests of ``rows`` that wait for the ``user_id`` parameter's vote now, of
    one of ``priorities``, and pass the filters and the search (words, and ``number``).
    Status and priorities are literals, as the index's keys, so that either planner reads
    them as ranges of ``_INBOX_INDEX``."""
    priority = (
        rows.c.priority == literal_column(f"'{priorities[0]}'")
        if len(priorities) == 1
        else rows.c.priority.in_([literal_column(f"'{p}'") for p in priorities])
    )
    conditions: list[ColumnElement[bool]] = [
        rows.c.org_id == bindparam("org_id"),
        rows.c.status == literal_column("'pending'"),
        priority,
        ~_is_past_expiry(rows),
    ]
    conditions += [
        rows.c[name] == bindparam(name) for name in INBOX_VALUE_FILTERS if name in filters
    ]
    numbered = rows.c.number == bindparam("search_number", type_=Integer())
    if number == "only":
        conditions.append(numbered)
    elif search:
        words = matches_search(dialect, rows)
        conditions.append(or_(numbered, words) if number == "or_words" else words)
    conditions.append(votable_now(bindparam("user_id"), rows, dialect, NOW))
    if hide_own:
        # The person's own connections: an uncorrelated subquery, read once per
        # statement through ``ix_connections_owner_id`` (migration 0029).
        own = select(Connection.id).where(Connection.owner_id == bindparam("user_id"))
        conditions.append(rows.c.connection_id.not_in(own))
    return conditions


def _inbox_part(
    dialect: str,
    priority: str,
    filters: frozenset[str],
    search: bool,
    number: NumberTest,
    hide_own: bool = False,
) -> Subquery:
    """One priority's part of an inbox page: its first ``reach`` waiting requests, oldest
    first, with the priority's place in the urgency order."""
    rows = ApprovalRequest.__table__.alias(_inbox_alias(priority))
    urgency = literal_column(str(INBOX_PRIORITIES.index(priority)), Integer()).label("urgency")
    return (
        select(rows.c.id, urgency, rows.c.created_at)
        .where(*_waiting_conditions(dialect, rows, (priority,), filters, search, number, hide_own))
        .order_by(rows.c.created_at, rows.c.id)
        .limit(bindparam("reach"))
        .subquery(f"part_{priority}")
    )


def _inbox_count(
    dialect: str,
    priorities: tuple[str, ...],
    filters: frozenset[str],
    search: bool,
    number: NumberTest,
    hide_own: bool = False,
) -> PreparedQuery:
    """How many requests wait, counted one past ``WAITING_COUNT_CAP`` at most."""
    rows = ApprovalRequest.__table__.alias("waiting")
    waiting = (
        select(literal_column("1"))
        .select_from(rows)
        .where(*_waiting_conditions(dialect, rows, priorities, filters, search, number, hide_own))
        .limit(bindparam("count_reach"))
        .subquery("counted")
    )
    hint = (
        [SQLiteIndex("approval_requests AS waiting", _INBOX_INDEX)] if dialect == "sqlite" else []
    )
    return PreparedQuery(
        select(func.count().label("total")).select_from(waiting), sqlite_indexes=hint
    )
