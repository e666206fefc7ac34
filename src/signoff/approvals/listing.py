"""List pages (``GET /api/v1/approvals``): their queries, prepared once per shape of filters.

Every filter's values are parameters, so a shape (which statuses, which other filters,
whether searching) is compiled once. PostgreSQL plans each query from the statistics it
keeps. SQLite keeps none here, and its planner would read a page of a rare value by
walking the org's whole history: SQLite is told which index to read (``SQLiteIndex``),
and a filter that is an OR of two sets of rows is read whichever way costs less once its
total is known (``ListQueries``). docs/engineering-log.md, *List pages of a large org*,
has the figures; tests/test_list_plans.py pins the behaviour.
"""

from __future__ import annotations

import functools
import operator
import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Literal, cast

import orjson
from sqlalchemy import (
    BindParameter,
    ColumnElement,
    Integer,
    Select,
    String,
    Uuid,
    and_,
    bindparam,
    case,
    column,
    exists,
    func,
    literal,
    literal_column,
    or_,
    select,
    table,
    text,
    true,
    union_all,
)
from sqlalchemy.orm import InstrumentedAttribute, aliased
from sqlalchemy.sql import operators
from sqlalchemy.sql.elements import UnaryExpression
from sqlalchemy.sql.selectable import CTE, FromClause, NamedFromClause, Subquery

from signoff.approvals.rendered import is_past_expiry as _is_past_expiry
from signoff.approvals.rendered import request_json
from signoff.models import ApprovalRequest, ApprovalStep, Vote
from signoff.storage import PreparedQuery, QueryRunner, SQLiteIndex

_SEARCH_TERM = re.compile(r"[^\W_]+", re.UNICODE)
MAX_SEARCH_TERMS = 16
# The SQLite FTS5 table of migration 0006: title, description and org_id are indexed.
_FTS = table("approval_requests_fts", column("request_id"), column("created_at"))
# bm25 weights of its columns (title, description, org_id): a title match outranks a
# description match, as the A and B weights of the PostgreSQL vector make it there; the
# org, which every match of a search has, weighs nothing.
_FTS_COLUMN_WEIGHTS = (10.0, 1.0, 0.0)

# Each org's number of requests, kept by triggers: on SQLite one row per org (migration
# 0005), on PostgreSQL a few rows per org whose sum it is (0018: concurrent creates add to
# different rows, so none waits on another's row lock).
_REQUEST_COUNTS = table(
    "approval_request_counts", column("org_id", Uuid()), column("total", Integer())
)
_ORG_TOTAL: Select[Any] = select(
    func.coalesce(func.sum(_REQUEST_COUNTS.c.total), literal_column("0")).label("total")
).where(_REQUEST_COUNTS.c.org_id == bindparam("org_id"))
_UNFILTERED_TOTAL = PreparedQuery(_ORG_TOTAL)
# A page's total is counted exactly up to this many matches; past it, counting stops and
# the total reads as this bound (``Page.total_is_exact`` false): a page of a large org
# never counts its whole history (docs/api.md, *Totals and cursors*).
TOTAL_EXACT_UP_TO = 10_000
# A search ranks its matches, best first, when it has at most this many; with more, it
# lists them newest first, and its total reads this bound (not exact). Why: ranking reads
# and scores every match, and a word found in a large share of a large org's requests
# has hundreds of thousands of them; counting a search's matches also costs more per
# match than counting a filter's (docs/api.md of the list, docs/performance.md).
SEARCH_RANKED_UP_TO = 500


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
    # Keyset pagination: only requests after this one in list order (newest first).
    after: uuid.UUID | None = None
    # Every request but this one (a search for a number lists that request first, apart).
    excluded_id: uuid.UUID | None = None


@dataclass(frozen=True)
class Page:
    """A page's rendered requests, its total (exact up to ``TOTAL_EXACT_UP_TO``, that
    bound past it) and the cursor of the page after it, if the page is full."""

    rendered: list[str]
    total: int
    total_is_exact: bool
    next_cursor: str | None


def total_bound(searched: bool) -> int:
    """How far a page's total is counted exactly: ``SEARCH_RANKED_UP_TO`` for a search
    (never more than ``TOTAL_EXACT_UP_TO``), ``TOTAL_EXACT_UP_TO`` otherwise."""
    return min(SEARCH_RANKED_UP_TO, TOTAL_EXACT_UP_TO) if searched else TOTAL_EXACT_UP_TO


def bounded_total(counted: int, *, searched: bool = False) -> tuple[int, bool]:
    """A count that stopped one past ``total_bound(searched)`` as (total, exact)."""
    bound = total_bound(searched)
    if counted > bound:
        return bound, False
    return counted, True


def next_cursor(rendered: list[str], limit: int) -> str | None:
    """The cursor after a full page: its last request's id (opaque to clients)."""
    if len(rendered) < limit or not rendered:
        return None
    return str(orjson.loads(rendered[-1])["id"])


def search_terms(text_query: str) -> list[str]:
    """Words of a search box, stripped of every operator of either engine's query syntax."""
    return [t.lower() for t in _SEARCH_TERM.findall(text_query)][:MAX_SEARCH_TERMS]


# A search box holding a request's number, ``#1234`` or ``1234``, and nothing else.
_NUMBER_SEARCH = re.compile(r"\s*(#?)\s*(\d{1,10})\s*")
_LARGEST_NUMBER = 2**31 - 1  # the column's type


@dataclass(frozen=True)
class NumberSearch:
    """A search for a request's number: ``#1234`` finds that request alone (``only``);
    ``1234`` finds it first, then the requests whose text has the word, as any search."""

    number: int
    only: bool


def number_searched(text_query: str | None) -> NumberSearch | None:
    """The request number a search box holds, if it holds only that."""
    found = _NUMBER_SEARCH.fullmatch(text_query or "")
    if found is None or int(found.group(2)) > _LARGEST_NUMBER:
        return None
    return NumberSearch(int(found.group(2)), only=bool(found.group(1)))


async def read_page(
    queries: QueryRunner,
    org_id: uuid.UUID,
    filters: ListFilters,
    *,
    now: datetime,
    offset: int,
    limit: int,
) -> tuple[list[str], int]:
    """A page of the org's requests that pass ``filters``, newest first, each rendered as
    its JSON object by the database (``rendered.py``), and their total; read in one
    transaction. An approver's inbox, most urgent first, is ``read_inbox``.

    A search for a number (``number_searched``) lists the request of that number first,
    if it passes the other filters; then, for ``1234`` but not ``#1234``, the text's
    matches, that request left out of them."""
    searched = number_searched(filters.search)
    if searched is None:
        return await _read_page(queries, org_id, filters, now=now, offset=offset, limit=limit)
    numbered = await _numbered_request(queries, org_id, filters, searched.number, now)
    first = [numbered.json] if numbered is not None and offset == 0 else []
    if searched.only:
        return first, int(numbered is not None)
    if numbered is None:
        return await _read_page(queries, org_id, filters, now=now, offset=offset, limit=limit)
    rest, total = await _read_page(
        queries,
        org_id,
        replace(filters, excluded_id=numbered.id),
        now=now,
        offset=max(offset - 1, 0),
        limit=limit - len(first),
    )
    return first + rest, total + 1


async def _numbered_request(
    queries: QueryRunner, org_id: uuid.UUID, filters: ListFilters, number: int, now: datetime
) -> Any | None:
    """The org's request numbered ``number``, if it passes ``filters`` but the search: a
    row of ``id`` and ``json``, or None."""
    params = _filter_params(org_id, filters, now)
    params["number"] = number
    statuses = tuple(sorted(set(filters.statuses or ())))
    shape = frozenset(name for name in _VALUE_FILTERS if name in params)
    return await queries.one(_numbered_query(queries.dialect_name, statuses, shape), params)


@functools.lru_cache(maxsize=64)
def _numbered_query(
    dialect: str, statuses: tuple[str, ...], filters: frozenset[str]
) -> PreparedQuery:
    """One request found by its number in the org's unique (org_id, number) index, and
    tested against the filters."""
    return PreparedQuery(
        select(ApprovalRequest.id.label("id"), request_json(dialect).label("json")).where(
            ApprovalRequest.org_id == bindparam("org_id"),
            ApprovalRequest.number == bindparam("number"),
            *_conditions(statuses, filters),
        )
    )


def _filter_params(org_id: uuid.UUID, filters: ListFilters, now: datetime) -> dict[str, Any]:
    """The parameters of a list query for ``filters`` but the search and the page."""
    params: dict[str, Any] = {"org_id": org_id, "now": now}
    params.update(
        (name, getattr(filters, name))
        for name in _VALUE_FILTERS
        if getattr(filters, name) is not None
    )
    return params


async def _read_page(
    queries: QueryRunner,
    org_id: uuid.UUID,
    filters: ListFilters,
    *,
    now: datetime,
    offset: int,
    limit: int,
) -> tuple[list[str], int]:
    """``read_page``, the search taken as words only."""
    params = _filter_params(org_id, filters, now) | {"offset": offset, "limit": limit}
    if filters.search is not None:
        terms = search_terms(filters.search)
        if not terms:
            return [], 0
        forms = None
        if queries.dialect_name == "sqlite":
            forms = [await _sqlite_word_forms(queries, term) for term in terms]
        params["search_query"] = _search_query(queries.dialect_name, terms, org_id, forms)
        params["search_words"] = _search_words(terms, forms)
    if filters.after is not None:
        params["after_id"] = filters.after
    shape = _Shape(
        tuple(sorted(set(filters.statuses or ()))),
        frozenset(name for name in _VALUE_FILTERS if name in params),
        filters.search is not None,
    )
    plan = page_queries(
        queries.dialect_name,
        shape.statuses,
        shape.filters,
        shape.search,
        filters.after is not None,
    )
    # A filter's or a word's best plan depends on its value (how many rows it chooses):
    # PostgreSQL plans those pages for each call's values; a plain page keeps one plan.
    planned_per_call = bool(shape.statuses or shape.filters or shape.search)
    if (newest := plan.newest_matches) is not None:

        def search_page_for(counted: list[list[Any]]) -> list[tuple[PreparedQuery, Any]]:
            if _total(counted[0]) <= total_bound(True):
                return [(plan.page, params)]
            sorted_ = plan.newest_matches_sorted
            if sorted_ is not None and int(counted[0][0].probed) < _WALKED_PAGE_FROM:
                return [(sorted_, params)]
            return [(newest, params)]

        totals, rows = await queries.snapshot_read_then_choose(
            [(plan.count, params)], search_page_for, plan_each_call=planned_per_call
        )
        return [row.json for row in rows], _total(totals)
    if (page_and_total := plan.page_and_total) is not None:
        ((row,),) = await queries.snapshot_read(
            (page_and_total, params), plan_each_call=planned_per_call
        )
        return list(row.rendered), int(row.total)
    if plan.page_by_sorting_matches is None:
        rows, totals = await queries.snapshot_read(
            (plan.page, params), (plan.count, params), plan_each_call=planned_per_call
        )
        return [row.json for row in rows], _total(totals)

    def page_for(counted: list[list[Any]]) -> list[tuple[PreparedQuery, Mapping[str, Any]]]:
        matches, org_total = _total(counted[0]), _total(counted[1])
        if matches > TOTAL_EXACT_UP_TO:
            # Counting stopped: many matches, which a walk in list order meets soon.
            return [(plan.page, params)]
        return [(plan.page_for(matches, org_total, offset + limit), params)]

    totals, _, rows = await queries.snapshot_read_then_choose(
        [(plan.count, params), (_UNFILTERED_TOTAL, params)],
        page_for,
        plan_each_call=planned_per_call,
    )
    return [row.json for row in rows], _total(totals)


@dataclass(frozen=True)
class _Shape:
    """What a list query is prepared for: the statuses, the other filters, searching."""

    statuses: tuple[str, ...]
    filters: frozenset[str]
    search: bool


def _total(rows: Sequence[Any]) -> int:
    return int(rows[0].total) if rows else 0


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
    "excluded_id",
)


@dataclass(frozen=True)
class ListQueries:
    """A list page's queries: its rows (one field, ``json``) and its total.

    On SQLite, a filter that is an OR of two sets of rows (a decided window, ``expired``,
    several statuses) has no index that gives the list order, and the page can be read two
    ways: by walking the org's history newest first (``page``) or by sorting the rows the
    filter chose through indexes (``page_by_sorting_matches``). ``page_for`` picks one once
    the total is known.
    """

    page: PreparedQuery
    count: PreparedQuery
    page_by_sorting_matches: PreparedQuery | None = None
    # A search's page newest first, for a search of more than ``SEARCH_RANKED_UP_TO``
    # matches (``page`` ranks them).
    newest_matches: PreparedQuery | None = None
    # PostgreSQL: ``newest_matches`` read through the search index and sorted, for a search
    # whose matches are too few among the org's newest requests to walk its history
    # (``_postgres_search_count``'s ``probed``).
    newest_matches_sorted: PreparedQuery | None = None
    # PostgreSQL, a page that is not searched: the page and its total in one statement, one
    # row (``_page_and_total``), so one round trip instead of two.
    page_and_total: PreparedQuery | None = None

    def page_for(self, matches: int, org_total: int, reach: int) -> PreparedQuery:
        """The cheaper page for ``matches`` of ``org_total`` requests, of which the page
        skips and shows ``reach``: the walk reads at most every request that does not
        match, plus the reach; the sort reads every match. Each bound holds however the
        matches lie in time."""
        if self.page_by_sorting_matches is None or org_total - matches + reach < matches:
            return self.page
        return self.page_by_sorting_matches


@functools.lru_cache(maxsize=256)
def page_queries(
    dialect: str,
    statuses: tuple[str, ...],
    filters: frozenset[str],
    search: bool,
    after: bool = False,
) -> ListQueries:
    """A list page's queries, prepared once per shape of filters: the values are all
    parameters. ``after``: the page starts after the request ``after_id`` (a cursor)."""
    conditions = [ApprovalRequest.org_id == bindparam("org_id"), *_conditions(statuses, filters)]
    if after:
        # The count is that of the filters alone; the page starts after the cursor.
        counted = page_queries(dialect, statuses, filters, search, False)
        if search:  # pragma: no cover - the endpoint refuses a cursor with a search
            raise ValueError("a search is ordered by rank: it has no cursor")
        keyset = [*conditions, *_after_cursor()]
        if dialect == "postgresql":
            rendered = _page_rendered_after_choosing(keyset, False)
            return ListQueries(
                PreparedQuery(rendered),
                counted.count,
                page_and_total=_page_and_total(rendered, counted.count),
            )
        return ListQueries(_page_of(keyset, indexes=[_ORG_CREATED_INDEX]), counted.count)
    count_query: Select[Any] = select(literal_column("1")).select_from(ApprovalRequest)
    if search:
        count_query, _ = _with_search(dialect, count_query)
        searched_count = PreparedQuery(
            _bounded_count(count_query.where(*conditions), total_bound(True))
        )
    if dialect == "postgresql":
        if search:
            page = PreparedQuery(_page_rendered_after_choosing(conditions, True))
            walked = [*conditions, _postgres_match_by_walking()]
            newest = PreparedQuery(_page_rendered_after_choosing(walked, False))
            return ListQueries(
                page,
                _postgres_search_count(conditions),
                newest_matches=newest,
                newest_matches_sorted=_postgres_newest_sorted(conditions),
            )
        # With no filter, the org's count kept by triggers: nothing of its history is read.
        rendered = _page_rendered_after_choosing(conditions, False)
        count = PreparedQuery(
            _ORG_TOTAL if len(conditions) == 1 else _bounded_count(count_query.where(*conditions))
        )
        return ListQueries(
            PreparedQuery(rendered), count, page_and_total=_page_and_total(rendered, count)
        )
    if search and len(conditions) == 1:
        return _sqlite_org_search()
    if search:
        return ListQueries(
            _sqlite_search_page(conditions),
            searched_count,
            newest_matches=_newest(conditions),
        )
    if len(conditions) == 1:
        # The org's whole count, kept by triggers (migration 0005): an unfiltered page
        # need not count the org's history.
        return ListQueries(_page_of(conditions), _UNFILTERED_TOTAL)
    union_sets = _sqlite_union_filter_row_sets(statuses, filters)
    if union_sets.decided or union_sets.statuses:
        return _sqlite_union_filter_queries(statuses, filters, conditions, count_query, union_sets)
    index = _sqlite_filter_index(statuses, filters)
    counted_by = index
    if "decided_after" in filters or "decided_before" in filters:
        # Only decided statuses (``_decided_window``): a range of the decided index, which
        # holds the status too; the page walks the status's index from the window's end.
        counted_by = [_DECIDED_INDEX]
    return ListQueries(
        _sqlite_page_by_rowids(conditions, index) if index else _page_of(conditions),
        PreparedQuery(_bounded_count(count_query.where(*conditions)), sqlite_indexes=counted_by),
    )


def _sqlite_union_filter_queries(
    statuses: tuple[str, ...],
    filters: frozenset[str],
    conditions: list[ColumnElement[bool]],
    count_query: Select[Any],
    union_sets: _UnionFilterRowSets,
) -> ListQueries:
    """The queries of a filter that is an OR of two sets of rows (``ListQueries``)."""
    chosen = [
        ApprovalRequest.org_id == bindparam("org_id"),
        *_conditions(statuses, filters, union_sets=union_sets),
    ]
    sets = union_sets.decided + union_sets.statuses
    by_rowid = [
        SQLiteIndex("approval_requests", None),
        *(_ROW_SET_INDEX[alias.name] for alias, _ in sets),
    ]
    # With nothing else to filter by (``chosen``: the org, and one filter's sets), the
    # sets' rows are counted in their indexes alone.
    only_sets = len(chosen) == 2
    return ListQueries(
        page=_page_of(conditions, indexes=[_ORG_CREATED_INDEX]),
        count=_count_of(sets)
        if only_sets
        else PreparedQuery(_bounded_count(count_query.where(*chosen)), sqlite_indexes=by_rowid),
        page_by_sorting_matches=_sqlite_page_by_rowids(chosen, by_rowid),
    )


def _page_of(
    conditions: list[ColumnElement[bool]], *, indexes: Sequence[SQLiteIndex] = ()
) -> PreparedQuery:
    """A page read in list order through an index, with no sorter: SQLite renders only
    the rows it returns, and the rows OFFSET skips cost a step each."""
    rows_query = select(request_json("sqlite").label("json"))
    return PreparedQuery(
        _one_page("sqlite", rows_query, conditions, False)[0], sqlite_indexes=indexes
    )


def _sqlite_org_search() -> ListQueries:
    """A search with no other filter, on SQLite: the org's matches (``_search_query``) are
    counted and ranked in the search table alone, and only the page's requests are read.
    Joined to the requests for the ranking, every match's request was read, a cost that
    grows with the org (docs/engineering-log.md, *Search, narrowed to the org in the
    search index*)."""
    match = _fts_match()
    score = _bm25()
    chosen = (
        select(
            _FTS.c.request_id.label("id"),
            _FTS.c.created_at.label("created_at"),
            score.label("score"),
        )
        .where(*_fts_ranked_match())
        .order_by(score.asc(), _FTS.c.created_at.desc(), _FTS.c.request_id.desc())
        .offset(bindparam("offset"))
        .limit(bindparam("limit"))
        .subquery("chosen")
    )
    page = (
        select(request_json("sqlite", _PAGE).label("json"))
        .select_from(chosen.join(_PAGE, _PAGE.c.id == chosen.c.id))
        .order_by(chosen.c.score, chosen.c.created_at.desc(), chosen.c.id.desc())
    )
    count = _bounded_count(
        select(literal_column("1")).select_from(_FTS).where(match), total_bound(True)
    )
    return ListQueries(PreparedQuery(page), PreparedQuery(count), newest_matches=_newest(None))


def _newest(conditions: list[ColumnElement[bool]] | None) -> PreparedQuery:
    """A search's page newest first on SQLite: the search table's matches walked from its
    newest row back (FTS5 reads a match in either order of its rowids, which follow the
    order the requests were written), each joined to its request and, with other filters
    (``conditions``), kept if it passes them, until the page is full. Only the page's
    requests are rendered."""
    fts_rowid: ColumnElement[Any] = literal_column("approval_requests_fts.rowid")
    chosen: Select[Any]
    if conditions is None:
        chosen = select(_FTS.c.request_id.label("id"), fts_rowid.label("fts_rowid")).where(
            _fts_match()
        )
    else:
        chosen = (
            select(ApprovalRequest.id.label("id"), fts_rowid.label("fts_rowid"))
            .select_from(_FTS.join(ApprovalRequest, ApprovalRequest.id == _FTS.c.request_id))
            .where(_fts_match(), *conditions)
        )
    newest = (
        chosen.order_by(fts_rowid.desc())
        .offset(bindparam("offset"))
        .limit(bindparam("limit"))
        .subquery("chosen")
    )
    page = (
        select(request_json("sqlite", _PAGE).label("json"))
        .select_from(newest.join(_PAGE, _PAGE.c.id == newest.c.id))
        .order_by(newest.c.fts_rowid.desc())
    )
    return PreparedQuery(page)


def _sqlite_search_page(conditions: list[ColumnElement[bool]]) -> PreparedQuery:
    """A searched page on SQLite: the matches are ranked in a subquery that carries only
    their rowids and their order, and only the page's rows are rendered, as
    ``_sqlite_page_by_rowids`` does for sorted pages. Rendered before the sort, a search
    rendered every one of its matches (docs/engineering-log.md, *List pages of a large
    org*)."""
    keys: list[ColumnElement[Any]] = [
        literal_column("approval_requests.rowid").label("row_id"),
        ApprovalRequest.created_at.label("created_at"),
        ApprovalRequest.id.label("id"),
    ]
    ranked, rank = _one_page("sqlite", select(*keys), conditions, True)
    assert rank is not None  # a searched page is ranked
    chosen = ranked.add_columns(rank.element.label("rank")).subquery("chosen")
    page = (
        select(request_json("sqlite", _PAGE).label("json"))
        .select_from(chosen.join(_PAGE, literal_column("page.rowid") == chosen.c.row_id))
        .order_by(chosen.c.rank, chosen.c.created_at.desc(), chosen.c.id.desc())
    )
    return PreparedQuery(page)


def _sqlite_page_by_rowids(
    conditions: list[ColumnElement[bool]], indexes: Sequence[SQLiteIndex]
) -> PreparedQuery:
    """The page's rowids chosen and sorted, then only its rows rendered: SQLite computes
    the select list of every row that goes through a sorter, the rows OFFSET skips
    included, and rendering a row costs many times what sorting its rowid does
    (docs/engineering-log.md, *List pages of a large org*)."""
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
    history (``status=approved`` among an org's pending requests, say). Read through the
    filter's own index, a page reads only matching rows, newest first (only rows that
    share a ``created_at`` are sorted, for the ``id`` that breaks the tie), and stops at
    the page's end, whether few or most requests match (docs/engineering-log.md, *List
    pages of a large org*).

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
_DECIDED_INDEX = SQLiteIndex("approval_requests", "ix_approval_requests_org_decided")
# One set of rows of a filter that is an OR of two: the requests table under an alias,
# and the conditions that choose the set's rows through that alias's index.
_RowSet = tuple[NamedFromClause, list[ColumnElement[bool]]]
# The requests table again: the page rendered from rowids, and the subqueries that
# choose rowids for a page.
_PAGE = ApprovalRequest.__table__.alias("page")
_DECIDED = ApprovalRequest.__table__.alias("decided")
_EXPIRING = ApprovalRequest.__table__.alias("expiring")
_BY_STATUS = ApprovalRequest.__table__.alias("by_status")
_OVERDUE = ApprovalRequest.__table__.alias("overdue")
_LIVE = ApprovalRequest.__table__.alias("live")
# The index each alias reads its rows through: SQLite's planner would walk the org's
# history by ``org_id`` instead.
_ROW_SET_INDEX = {
    alias.name: SQLiteIndex(f"approval_requests AS {alias.name}", index)
    for alias, index in (
        (_DECIDED, "ix_approval_requests_org_decided"),
        (_EXPIRING, "ix_approval_requests_pending_expiry"),
        (_BY_STATUS, "ix_approval_requests_org_status_created"),
        (_OVERDUE, "ix_approval_requests_pending_expiry"),
        (_LIVE, "ix_approval_requests_org_status_created"),
    )
}


@dataclass(frozen=True)
class _UnionFilterRowSets:
    """On SQLite, the filters that are an OR of two sets of rows, as those sets (empty
    when the filter is not given): no index gives their list order (``ListQueries``)."""

    decided: list[_RowSet]
    statuses: list[_RowSet]


def _sqlite_union_filter_row_sets(
    statuses: tuple[str, ...], filters: frozenset[str]
) -> _UnionFilterRowSets:
    decided_window = "decided_after" in filters or "decided_before" in filters
    return _UnionFilterRowSets(
        decided=_sqlite_decided_window(filters)
        if decided_window and not _only_decided_statuses(statuses)
        else [],
        statuses=_sqlite_status_set(statuses) if _reads_statuses_by_rowid(statuses) else [],
    )


def _bounded_count(rows: Select[Any], up_to: int | None = None) -> Select[Any]:
    """How many rows ``rows`` (a select of a constant) has, counting at most one past
    ``up_to`` (``TOTAL_EXACT_UP_TO`` if not given; ``bounded_total``)."""
    bound = TOTAL_EXACT_UP_TO if up_to is None else up_to
    chosen = rows.limit(bound + 1).subquery("counted")
    return select(func.count().label("total")).select_from(chosen)


def _after_cursor() -> list[ColumnElement[bool]]:
    """Requests after ``after_id`` in list order (``created_at``, then ``id``, newest
    first); none if that request is not the org's. The first condition is a range of the
    org's index on ``created_at``; the second breaks ties within one instant."""
    cursor = aliased(ApprovalRequest, name="cursor")
    cursor_created_at = (
        select(cursor.created_at)
        .where(cursor.id == bindparam("after_id"), cursor.org_id == bindparam("org_id"))
        .scalar_subquery()
    )
    return [
        ApprovalRequest.created_at <= cursor_created_at,
        or_(
            ApprovalRequest.created_at < cursor_created_at,
            ApprovalRequest.id < bindparam("after_id", type_=ApprovalRequest.id.type),
        ),
    ]


def _one_page(
    dialect: str,
    query: Select[Any],
    conditions: list[ColumnElement[bool]],
    search: bool,
    *,
    ranked: bool = True,
) -> tuple[Select[Any], ColumnElement[Any] | None]:
    """``query`` narrowed to the matching requests, in list order (best match first when
    searching and ``ranked``, then newest first), one page of them; and the search rank,
    if ranked."""
    order: list[Any] = [ApprovalRequest.created_at.desc(), ApprovalRequest.id.desc()]
    rank = None
    if search:
        query, rank = _with_search(dialect, query, ranked=ranked)
        if ranked:
            order = [rank, *order]
        else:
            rank = None
    page = (
        query.where(*conditions)
        .order_by(*order)
        .offset(bindparam("offset"))
        .limit(bindparam("limit"))
    )
    return page, rank


def _page_rendered_after_choosing(
    conditions: list[ColumnElement[bool]], search: bool, *, ranked: bool = True
) -> Select[Any]:
    """PostgreSQL's page query: the page's rows are chosen in a subquery, and only they are
    rendered. Why: PostgreSQL evaluates the select list for every row that OFFSET then
    skips; rendering in the same query made page 25 render 500 objects to answer 20
    (docs/engineering-log.md, *The fifth round*)."""
    columns = select(*ApprovalRequest.__table__.columns)
    chosen, rank = _one_page("postgresql", columns, conditions, search, ranked=ranked)
    if rank is not None:
        # The rank (ts_rank(...) DESC) travels with the rows, to order the page again.
        chosen = chosen.add_columns(rank.element.label("rank"))
    page = chosen.subquery("page")
    outer_order: list[Any] = [page.c.created_at.desc(), page.c.id.desc()]
    if rank is not None:
        outer_order = [page.c.rank.desc(), *outer_order]
    return select(request_json("postgresql", page).label("json")).order_by(*outer_order)


def _page_and_total(page: Select[Any], count: PreparedQuery) -> PreparedQuery:
    """PostgreSQL: a page (one column, ``json``, in list order) and its total (``count``)
    as one statement that answers one row: ``total``, and ``rendered``, the page's
    objects in order (an array, empty past the last page). Each part is planned as it is
    alone (a subquery each); asked as two statements, they cost the server and the
    database a round trip more."""
    assert isinstance(count.statement, Select)
    return PreparedQuery(
        select(
            count.statement.scalar_subquery().label("total"),
            func.array(page.scalar_subquery()).label("rendered"),
        )
    )


def _conditions(
    statuses: tuple[str, ...],
    filters: frozenset[str],
    *,
    union_sets: _UnionFilterRowSets | None = None,
) -> list[ColumnElement[bool]]:
    """The filters' conditions. With ``union_sets`` (SQLite), those that are an OR of two
    sets of rows are the rowids of those sets, which choose the same requests
    (``_sqlite_decided_window``, ``_sqlite_status_set``)."""
    conditions: list[ColumnElement[bool]] = []
    if union_sets is not None and union_sets.statuses:
        conditions.append(_rowids_in(union_sets.statuses))
    elif statuses:
        conditions.append(or_(*(_status_condition(status) for status in statuses)))
    for name in ("priority", "action_type", "source"):
        if name in filters:
            conditions.append(getattr(ApprovalRequest, name) == bindparam(name))
    if "created_after" in filters:
        conditions.append(ApprovalRequest.created_at >= bindparam("created_after"))
    if "created_before" in filters:
        conditions.append(ApprovalRequest.created_at < bindparam("created_before"))
    if union_sets is not None and union_sets.decided:
        conditions.append(_rowids_in(union_sets.decided))
    elif "decided_after" in filters or "decided_before" in filters:
        conditions.append(_decided_window(statuses, filters))
    if "assigned_to" in filters:
        conditions.append(_awaiting_vote_of(bindparam("assigned_to")))
    if "excluded_id" in filters:
        conditions.append(ApprovalRequest.id != bindparam("excluded_id"))
    return conditions


def _with_search(
    dialect: str, query: Select[Any], *, ranked: bool = False
) -> tuple[Select[Any], Any]:
    """Narrow ``query`` to full-text matches of the ``search_query`` parameter and give
    their ranking; both use an index.

    Every term must match, as a prefix, case-insensitively; titles weigh more than
    descriptions. PostgreSQL: the GIN-indexed ``search_vector``. SQLite: a join with the
    FTS5 table, ranked by bm25 with title and description weights (its default ``rank``
    weighs every column alike). ``ranked``: the rows are ranked (``_fts_ranked_match``).
    """
    if dialect == "postgresql":
        # Accents folded as in the indexed vector (migration 0011).
        tsquery = _postgres_tsquery()
        vector: ColumnElement[Any] = literal_column("approval_requests.search_vector")
        return query.where(vector.op("@@")(tsquery)), func.ts_rank(vector, tsquery).desc()
    match = _fts_ranked_match() if ranked else [_fts_match()]
    joined = query.join(_FTS, _FTS.c.request_id == ApprovalRequest.id).where(*match)
    return joined, _bm25().asc()  # bm25 is negative: better matches sort first


def _fts_ranked_match() -> list[ColumnElement[bool]]:
    """The org's matches of a search (``_fts_match``) found in a form bm25 ranks cheaply:
    the search table's rows that match the words alone and are among the org's matches.

    Why: bm25 weighs each phrase of the query by how many rows hold it, and counts them
    on its first call; with the org's id as a phrase of the query, it read one entry for
    every request of the org (the org's id is in each), whatever the words, a cost that
    grew with the org. The org's weight is nought, so the scores are the same. The org's
    matches are read first (``+``: not as a lookup of each row) and are few: a search is
    ranked only up to ``SEARCH_RANKED_UP_TO`` matches."""
    words = literal_column("approval_requests_fts").op("MATCH")(
        bindparam("search_words", type_=String())
    )
    orgs_matches: Select[Any] = (
        select(literal_column("org_matches.rowid"))
        .select_from(text("approval_requests_fts AS org_matches"))
        .where(
            literal_column("org_matches.approval_requests_fts").op("MATCH")(
                _search_query_parameter()
            )
        )
    )
    return [words, literal_column("+approval_requests_fts.rowid").in_(orgs_matches)]


# PostgreSQL: a search is first tested on the newest ``_PROBED_ROWS`` requests of the org
# that pass its other filters; with ``_COMMON_IN_PROBED`` matches among them it is read by
# walking the org's history (at most ``_WALKED_ROWS`` requests for its count) rather than
# through the search index (``_postgres_search_count``).
_PROBED_ROWS = 2_000
_WALKED_ROWS = 20_000
# A page newest first walks the org's history when this many of the probed rows match
# (its first page then reads some thousands of rows at most); with fewer, the index finds
# the matches and they are sorted.
_WALKED_PAGE_FROM = 10
# As many as the walk needs to find the bound's matches in its rows, at the same share.
_COMMON_IN_PROBED = _PROBED_ROWS * (SEARCH_RANKED_UP_TO + 1) // _WALKED_ROWS


def _postgres_tsquery() -> ColumnElement[Any]:
    return func.to_tsquery("simple", func.signoff_unaccent(_search_query_parameter()))


def _postgres_match_by_walking() -> ColumnElement[bool]:
    """The search's match, written so that PostgreSQL cannot answer it from the GIN index:
    it is tested on each row that another index (the org's history, newest first) reads."""
    vector: ColumnElement[Any] = literal_column("approval_requests.search_vector")
    return vector.op("@@")(_postgres_tsquery()).is_(true())


def _postgres_matches_among_newest(
    conditions: list[ColumnElement[bool]], rows: int, up_to: int | None
) -> ColumnElement[Any]:
    """How many of the newest ``rows`` requests passing ``conditions`` match the search
    (counting at most ``up_to + 1``), tested row by row: no GIN index."""
    newest = (
        select(literal_column("approval_requests.search_vector").label("vector"))
        .select_from(ApprovalRequest)
        .where(*conditions)
        .order_by(ApprovalRequest.created_at.desc(), ApprovalRequest.id.desc())
        .limit(rows)
        .subquery("newest")
    )
    matching: Select[Any] = (
        select(literal_column("1"))
        .select_from(newest)
        .where(newest.c.vector.op("@@")(_postgres_tsquery()))
    )
    if up_to is not None:
        return _bounded_count(matching, up_to).scalar_subquery()
    return select(func.count()).select_from(matching.subquery("matching")).scalar_subquery()


def _postgres_search_count(conditions: list[ColumnElement[bool]]) -> PreparedQuery:
    """A search's bounded count on PostgreSQL, read one of two ways.

    Why: the GIN index finds a rare word's few matches at once, but for a word in a large
    share of the org it gathers every match of each word before the first is counted, a
    cost that grows with the org; reading the org's history newest first and testing each
    row finds a common word's first ``SEARCH_RANKED_UP_TO`` matches within a few thousand
    rows. PostgreSQL's planner cannot tell which applies: its estimate for a prefix
    (``word:*``) is a constant. So the newest ``_PROBED_ROWS`` requests that pass the
    other filters are tested first; if ``_COMMON_IN_PROBED`` of them match, the newest
    ``_WALKED_ROWS`` are, and if they hold more than the bound the count is the bound's;
    otherwise the index counts. Each branch runs only when reached (an InitPlan runs when
    first used), and every branch gives the same total. The probe's matches come too
    (``probed``), for the choice of the page (``read_page``)."""
    bound = total_bound(True)
    probed = _postgres_matches_among_newest(conditions, _PROBED_ROWS, None)
    walked = _postgres_matches_among_newest(conditions, _WALKED_ROWS, bound)
    every_row: Select[Any] = select(literal_column("1")).select_from(ApprovalRequest)
    indexed, _ = _with_search("postgresql", every_row)
    by_index = _bounded_count(indexed.where(*conditions), bound).scalar_subquery()
    probe = select(probed.label("probed")).subquery("probe")
    total = case(
        (probe.c.probed < _COMMON_IN_PROBED, by_index),
        # The bound's own figure: ``walked`` named again would be counted again.
        (walked > bound, literal(bound + 1)),
        else_=by_index,
    )
    return PreparedQuery(select(total.label("total"), probe.c.probed).select_from(probe))


def _postgres_newest_sorted(conditions: list[ColumnElement[bool]]) -> PreparedQuery:
    """A search's page newest first on PostgreSQL, its matches found through the GIN index
    and sorted: for a search of more than the bound's matches that are too sparse among
    the org's newest requests to walk its history for (``_WALKED_PAGE_FROM``). The matches
    are gathered in a materialized CTE, which PostgreSQL plans on its own: in one query
    with the order and the limit, its planner walked the history anyway, misled by its
    constant estimate for a prefix."""
    rows = ApprovalRequest.__table__
    matched, _ = _with_search("postgresql", select(rows.c.id, rows.c.created_at))
    matches = matched.where(*conditions).cte("matches").prefix_with("MATERIALIZED")
    chosen = (
        select(matches.c.id)
        .order_by(matches.c.created_at.desc(), matches.c.id.desc())
        .offset(bindparam("offset"))
        .limit(bindparam("limit"))
    )
    page = select(*rows.columns).where(rows.c.id.in_(chosen)).subquery("page")
    rendered = select(request_json("postgresql", page).label("json"))
    return PreparedQuery(rendered.order_by(page.c.created_at.desc(), page.c.id.desc()))


def _search_query_parameter() -> BindParameter[str]:
    return bindparam("search_query", type_=String())


def _fts_match() -> ColumnElement[bool]:
    return literal_column("approval_requests_fts").op("MATCH")(_search_query_parameter())


def _bm25() -> ColumnElement[Any]:
    """The SQLite search score: negative, lower for better matches."""
    return func.bm25(literal_column("approval_requests_fts"), *_FTS_COLUMN_WEIGHTS)


def _search_query(
    dialect: str,
    terms: list[str],
    org_id: uuid.UUID,
    forms: Sequence[Sequence[str] | None] | None = None,
) -> str:
    """The search box's words as the engine's query: each a prefix, all required. On
    SQLite the query also names the org, whose id migration 0006 indexes as one word of
    its own column (stored as SQLite stores UUIDs), so that FTS5 finds that org's matches
    alone; the words are looked for in the title and the description only. ``forms``
    (SQLite): each term's indexed words, where known (``_sqlite_word_forms``)."""
    if dialect == "postgresql":
        return " & ".join(f"{term}:*" for term in terms)
    return " AND ".join((f'{{org_id}} : "{org_id.hex}"', _search_words(terms, forms)))


def _search_words(terms: list[str], forms: Sequence[Sequence[str] | None] | None = None) -> str:
    """The words of a SQLite search query (``_search_query``) without the org: each term
    as a prefix, or as the OR of the indexed words it is a prefix of (``forms``), which
    finds the same rows."""
    phrases = []
    for index, term in enumerate(terms):
        words = forms[index] if forms is not None else None
        if words is None:
            phrases.append(_phrase(term, prefix=True))
        else:
            # A column filter on each phrase, not on a parenthesized group: FTS5 has
            # read that form since its first release.
            alternatives = [_phrase(word, prefix=False) for word in [term, *words]]
            phrases.append("(" + " OR ".join(alternatives) + ")")
    return " AND ".join(phrases)


def _phrase(word: str, *, prefix: bool) -> str:
    return '{title description} : "' + word.replace('"', '""') + ('"*' if prefix else '"')


# SQLite: the search index's words (migration 0016), in order: a term's longer forms.
_TERMS = table("approval_requests_fts_terms", column("term", String()))
# A prefix with more longer forms than this stays a prefix query.
_MAX_WORD_FORMS = 8
_LONGER_WORDS = PreparedQuery(
    select(_TERMS.c.term)
    .where(_TERMS.c.term >= bindparam("after"), _TERMS.c.term < bindparam("past"))
    .limit(_MAX_WORD_FORMS + 1)
)


async def _sqlite_word_forms(queries: QueryRunner, term: str) -> list[str] | None:
    """The words longer than ``term`` that the search index holds and ``term`` is a prefix
    of, if there are at most ``_MAX_WORD_FORMS``; None if more, or if ``term`` is not
    plain ASCII letters and digits (the tokenizer folds other characters, this would not).

    Why: for a prefix query (``"word"*``) FTS5 gathers the entries of every word with that
    prefix into one list before it returns the first row, a cost that grows with the
    number of requests holding them (a common word, in a large org, costs tens of ms
    whatever the page's size). Exact words are read lazily, as far as the page and the
    bounded count need. The words come from the index's vocabulary (``fts5vocab``), which
    reads its terms in order from the prefix."""
    if not (term.isascii() and term.isalnum()):
        return None
    # From just after ``term`` (no word holds a control character): the vocabulary
    # counts each word it reads, and "> term" read ``term`` itself first.
    after, past = term + "\x01", term[:-1] + chr(ord(term[-1]) + 1)
    rows = await queries.all(_LONGER_WORDS, {"after": after, "past": past})
    if len(rows) > _MAX_WORD_FORMS:
        return None
    return [str(row.term) for row in rows]


def _decided_window(statuses: tuple[str, ...], filters: frozenset[str]) -> ColumnElement[bool]:
    """A decided window that agrees with reads before the sweep has run: a pending request
    past its deadline reads as decided at its ``expires_at``.

    Written as one range of ``decided_at`` (the org's index on it reads it) or one range of
    the pending deadlines (their partial index), since a pending request has no
    ``decided_at`` and a decided one is not pending; and as the first alone when the
    status filter keeps no request that may read as expired. As two ORs, one per bound,
    PostgreSQL could read only one bound through an index."""
    decided = and_(*_window(ApprovalRequest.decided_at, filters))
    if _only_decided_statuses(statuses):
        if "decided_before" not in filters:
            return decided
        # Implied (a request is decided after it was created), and a range of the list's
        # order: a page walking the filter's index newest first starts at the window's end
        # instead of reading every later request first.
        return and_(decided, ApprovalRequest.created_at < bindparam("decided_before"))
    expiring = and_(
        ApprovalRequest.status == "pending",
        _is_past_expiry(),
        *_window(ApprovalRequest.expires_at, filters),
    )
    return or_(decided, expiring)


def _only_decided_statuses(statuses: tuple[str, ...]) -> bool:
    """Whether a status filter keeps only requests that cannot read as expired."""
    return bool(statuses) and not {"pending", "expired"} & set(statuses)


def _sqlite_decided_window(filters: frozenset[str]) -> list[_RowSet]:
    """``_decided_window`` as two sets SQLite can read
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
    """Whether SQLite reads a status filter by ``_sqlite_status_set``: several statuses,
    or expired. One other status has an index that gives the list order."""
    return len(statuses) > 1 or statuses == ("expired",)


def _sqlite_status_set(statuses: tuple[str, ...]) -> list[_RowSet]:
    """The requests ``_status_condition`` chooses for ``statuses``, as disjoint sets
    SQLite can read through indexes: the org's requests stored with one of them (by the
    status index), and the pending ones whose reading depends on their deadline: for
    pending without expired, those not past it (by the status index again); for expired
    without pending, those past it (by the partial index of pending deadlines). With
    both, every pending request is one of them, whatever its deadline."""
    pending, expired = "pending" in statuses, "expired" in statuses
    stored = [s for s in statuses if s != "pending" or expired]
    sets: list[_RowSet] = []
    if stored:
        by_status = [
            _BY_STATUS.c.org_id == bindparam("org_id"),
            or_(*(_BY_STATUS.c.status == status for status in stored)),
        ]
        sets.append((_BY_STATUS, by_status))
    if pending and not expired:
        live = [
            _LIVE.c.org_id == bindparam("org_id"),
            _LIVE.c.status == "pending",
            ~_is_past_expiry(_LIVE),
        ]
        sets.append((_LIVE, live))
    if expired and not pending:
        overdue = [
            _OVERDUE.c.status == literal_column("'pending'"),  # a literal: see above
            _is_past_expiry(_OVERDUE),
            _OVERDUE.c.org_id == bindparam("org_id"),
        ]
        sets.append((_OVERDUE, overdue))
    return sets


def _rowids_in(sets: list[_RowSet]) -> ColumnElement[bool]:
    """The page's rows are the rows of ``sets`` (disjoint)."""
    chosen: list[Select[Any]] = [
        select(literal_column(f"{alias.name}.rowid")).where(*where) for alias, where in sets
    ]
    return literal_column("approval_requests.rowid").in_(union_all(*chosen))


def _count_of(sets: list[_RowSet]) -> PreparedQuery:
    """How many rows ``sets`` (disjoint) hold, counted in their indexes alone, each set
    up to one past ``TOTAL_EXACT_UP_TO``: their sum passes the bound when the filter's
    matches do (``bounded_total``), and no set is counted whole."""
    counts = [
        _bounded_count(
            select(literal_column("1")).select_from(alias).where(*where)
        ).scalar_subquery()
        for alias, where in sets
    ]
    return PreparedQuery(
        select(functools.reduce(operator.add, counts).label("total")),
        sqlite_indexes=[_ROW_SET_INDEX[alias.name] for alias, _ in sets],
    )


def _window(
    moment: ColumnElement[Any] | InstrumentedAttribute[Any], filters: frozenset[str]
) -> list[ColumnElement[bool]]:
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
    """Pending requests a user can vote on right now: the approver's inbox
    (``_votable_now``)."""
    return and_(_status_condition("pending"), _votable_now(user_id, ApprovalRequest.__table__))


def _votable_now(
    user_id: BindParameter[Any], rows: FromClause, dialect: str = "postgresql"
) -> ColumnElement[bool]:
    """Requests of ``rows`` the user can vote on now, if pending.

    Either a count-based request they have not voted on yet, or a pending step of theirs
    that is votable now (for a sequential chain: every lower step approved). Which of the
    two applies is one column (``has_steps``: steps exist only while it is set), tested
    first: a count-based request costs one lookup in the unique index of votes. On
    SQLite a request's steps are found by the request (``_not_indexed``): its planner,
    without statistics, would pick the approver's index, and read all of that person's
    pending steps for every request tested.
    """
    step, earlier = aliased(ApprovalStep), aliased(ApprovalStep)
    earlier_not_approved = exists().where(
        earlier.request_id == step.request_id,
        earlier.step_order < step.step_order,
        earlier.status != "approved",
    )
    keep_off_index: Callable[[Any], ColumnElement[Any]]
    keep_off_index = _not_indexed if dialect == "sqlite" else _as_is
    votable_step = exists().where(
        step.request_id == rows.c.id,
        keep_off_index(step.approver_id) == user_id,
        keep_off_index(step.status) == "pending",
        or_(rows.c.is_sequential.is_(False), ~earlier_not_approved),
    )
    not_yet_voted = ~exists().where(
        Vote.request_id == rows.c.id, Vote.user_id == user_id, Vote.step_id.is_(None)
    )
    return or_(
        and_(rows.c.has_steps.is_(False), not_yet_voted),
        and_(rows.c.has_steps.is_(True), votable_step),
    )


def _not_indexed(value: Any) -> ColumnElement[Any]:
    """SQLite's unary ``+``: the same value, which its planner will not look up by index."""
    return UnaryExpression(value, operator=operators.custom_op("+"), type_=value.type)


def _as_is(value: Any) -> ColumnElement[Any]:
    return cast("ColumnElement[Any]", value)


# ---- the inbox: what waits for one person's vote, most urgent first ----

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
    total, exact = _capped(_total(counted))
    return Inbox([row.json for row in rows], total, exact)


async def count_waiting(
    queries: QueryRunner, org_id: uuid.UUID, user_id: uuid.UUID, *, now: datetime
) -> tuple[int, bool]:
    """How many requests wait for ``user_id``'s vote now, exact up to
    ``WAITING_COUNT_CAP``: (the count or the cap, whether it is exact)."""
    inbox = _inbox_call(queries.dialect_name, org_id, user_id, InboxFilters(), now)
    assert inbox is not None  # no search: always a query
    (_, count), params = inbox
    return _capped(_total(await queries.all(count, params)))


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
        params["search_query"] = _search_query(dialect, terms, org_id)
    priorities = (filters.priority,) if filters.priority else INBOX_PRIORITIES
    return inbox_queries(dialect, priorities, present, words, number), params


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
    parts = [_inbox_part(dialect, priority, filters, search, number) for priority in priorities]
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
        select(request_json(dialect, _PAGE).label("json"))
        .select_from(chosen.join(_PAGE, _PAGE.c.id == chosen.c.id))
        .order_by(chosen.c.urgency, chosen.c.created_at, chosen.c.id)
    )
    hints = [
        SQLiteIndex(f"approval_requests AS {_inbox_alias(p)}", _INBOX_INDEX) for p in priorities
    ]
    return (
        PreparedQuery(page, sqlite_indexes=hints if dialect == "sqlite" else ()),
        _inbox_count(dialect, priorities, filters, search, number),
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
        words = _matches_search(dialect, rows)
        conditions.append(or_(numbered, words) if number == "or_words" else words)
    conditions.append(_votable_now(bindparam("user_id"), rows, dialect))
    return conditions


def _matches_search(dialect: str, rows: NamedFromClause) -> ColumnElement[bool]:
    """A full-text match of the ``search_query`` parameter, tested row by row: on SQLite
    the org's matches are read from the search table once per statement (a common table
    expression, which every priority's part shares; ``_search_query`` names the org), on
    PostgreSQL each row's indexed vector is tested."""
    if dialect == "postgresql":
        tsquery = func.to_tsquery("simple", func.signoff_unaccent(_search_query_parameter()))
        vector: ColumnElement[Any] = literal_column(f"{rows.name}.search_vector")
        return vector.op("@@")(tsquery)
    return rows.c.id.in_(select(_search_matches().c.request_id))


@functools.cache
def _search_matches() -> CTE:
    """The org's matches of the ``search_query`` parameter in SQLite's search table: one
    object, so that a statement that tests them in several places reads them once."""
    return select(_FTS.c.request_id.label("request_id")).where(_fts_match()).cte("search_matches")


def _inbox_part(
    dialect: str, priority: str, filters: frozenset[str], search: bool, number: NumberTest
) -> Subquery:
    """One priority's part of an inbox page: its first ``reach`` waiting requests, oldest
    first, with the priority's place in the urgency order."""
    rows = ApprovalRequest.__table__.alias(_inbox_alias(priority))
    urgency = literal_column(str(INBOX_PRIORITIES.index(priority)), Integer()).label("urgency")
    return (
        select(rows.c.id, urgency, rows.c.created_at)
        .where(*_waiting_conditions(dialect, rows, (priority,), filters, search, number))
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
) -> PreparedQuery:
    """How many requests wait, counted one past ``WAITING_COUNT_CAP`` at most."""
    rows = ApprovalRequest.__table__.alias("waiting")
    waiting = (
        select(literal_column("1"))
        .select_from(rows)
        .where(*_waiting_conditions(dialect, rows, priorities, filters, search, number))
        .limit(bindparam("count_reach"))
        .subquery("counted")
    )
    hint = (
        [SQLiteIndex("approval_requests AS waiting", _INBOX_INDEX)] if dialect == "sqlite" else []
    )
    return PreparedQuery(
        select(func.count().label("total")).select_from(waiting), sqlite_indexes=hint
    )
