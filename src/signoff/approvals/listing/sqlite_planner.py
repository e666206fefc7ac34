"""SQLite's planner of list pages: which index each query reads (``SQLiteIndex`` hints,
where SQLite's own planner, with no statistics, would walk the org's whole history), and
for a filter that is an OR of two sets of rows, the choice between walking the org's
history in list order and sorting the matches (``ListQueries.page_for``).
tests/storage/test_list_plans.py pins the behaviour.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Select,
    bindparam,
    literal_column,
    or_,
    select,
    union_all,
)
from sqlalchemy.sql.selectable import NamedFromClause

from signoff.approvals.json_in_sql import is_past_expiry as _is_past_expiry
from signoff.approvals.json_in_sql import request_json
from signoff.approvals.listing.filters import (
    decided_window_bounds,
    filter_conditions,
    only_decided_statuses,
)
from signoff.approvals.listing.paging import (
    PAGE,
    UNFILTERED_TOTAL,
    bounded_count,
    one_page,
    total_bound,
)
from signoff.approvals.listing.queries import ListQueries
from signoff.approvals.listing.search import FTS, bm25, fts_match, fts_ranked_match, with_search
from signoff.models import ApprovalRequest
from signoff.storage import PreparedQuery, SQLiteIndex


def list_queries(
    statuses: tuple[str, ...],
    filters: frozenset[str],
    conditions: list[ColumnElement[bool]],
    search: bool,
) -> ListQueries:
    """SQLite's queries of a list page of ``statuses`` and ``filters``, whose conditions
    are ``conditions`` (the org's first), searched or not."""
    count_query: Select[Any] = select(literal_column("1")).select_from(ApprovalRequest)
    if search and len(conditions) == 1:
        return _sqlite_org_search()
    if search:
        searched, _ = with_search("sqlite", count_query)
        return ListQueries(
            _sqlite_search_page(conditions),
            PreparedQuery(bounded_count(searched.where(*conditions), total_bound(True))),
            newest_matches=_newest(conditions),
        )
    if len(conditions) == 1:
        # The org's whole count, kept by triggers (migration 0005): an unfiltered page
        # need not count the org's history.
        return ListQueries(_page_of(conditions), UNFILTERED_TOTAL)
    union_sets = _sqlite_union_filter_row_sets(statuses, filters)
    if union_sets.decided or union_sets.statuses:
        return _sqlite_union_filter_queries(statuses, filters, conditions, count_query, union_sets)
    index = _sqlite_filter_index(statuses, filters)
    counted_by = index
    if "decided_after" in filters or "decided_before" in filters:
        # Only decided statuses (``decided_window``): a range of the decided index, which
        # holds the status too; the page walks the status's index from the window's end.
        counted_by = [_DECIDED_INDEX]
    return ListQueries(
        _sqlite_page_by_rowids(conditions, index) if index else _page_of(conditions),
        PreparedQuery(bounded_count(count_query.where(*conditions)), sqlite_indexes=counted_by),
    )


def list_queries_after_cursor(
    keyset: list[ColumnElement[bool]], count: PreparedQuery
) -> ListQueries:
    """SQLite's queries of a page after a cursor: the page walks the org's history from
    the cursor (``keyset``: the filters' and the cursor's conditions); ``count``, that of
    the filters alone."""
    return ListQueries(_page_of(keyset, indexes=[_ORG_CREATED_INDEX]), count)


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
        *filter_conditions(
            statuses,
            filters,
            statuses_as=_rowids_in(union_sets.statuses) if union_sets.statuses else None,
            decided_as=_rowids_in(union_sets.decided) if union_sets.decided else None,
        ),
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
        else PreparedQuery(bounded_count(count_query.where(*chosen)), sqlite_indexes=by_rowid),
        page_by_sorting_matches=_sqlite_page_by_rowids(chosen, by_rowid),
    )


def _page_of(
    conditions: list[ColumnElement[bool]], *, indexes: Sequence[SQLiteIndex] = ()
) -> PreparedQuery:
    """A page read in list order through an index, with no sorter: SQLite renders only
    the rows it returns, and the rows OFFSET skips cost a step each."""
    rows_query = select(request_json("sqlite").label("json"))
    return PreparedQuery(
        one_page("sqlite", rows_query, conditions, False)[0], sqlite_indexes=indexes
    )


def _sqlite_org_search() -> ListQueries:
    """A search with no other filter, on SQLite: the org's matches (``search_query``) are
    counted and ranked in the search table alone, and only the page's requests are read.
    Joined to the requests for the ranking, every match's request was read, a cost that
    grows with the org."""
    match = fts_match()
    score = bm25()
    chosen = (
        select(
            FTS.c.request_id.label("id"),
            FTS.c.created_at.label("created_at"),
            score.label("score"),
        )
        .where(*fts_ranked_match())
        .order_by(score.asc(), FTS.c.created_at.desc(), FTS.c.request_id.desc())
        .offset(bindparam("offset"))
        .limit(bindparam("limit"))
        .subquery("chosen")
    )
    page = (
        select(request_json("sqlite", PAGE).label("json"))
        .select_from(chosen.join(PAGE, PAGE.c.id == chosen.c.id))
        .order_by(chosen.c.score, chosen.c.created_at.desc(), chosen.c.id.desc())
    )
    count = bounded_count(
        select(literal_column("1")).select_from(FTS).where(match), total_bound(True)
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
        chosen = select(FTS.c.request_id.label("id"), fts_rowid.label("fts_rowid")).where(
            fts_match()
        )
    else:
        chosen = (
            select(ApprovalRequest.id.label("id"), fts_rowid.label("fts_rowid"))
            .select_from(FTS.join(ApprovalRequest, ApprovalRequest.id == FTS.c.request_id))
            .where(fts_match(), *conditions)
        )
    newest = (
        chosen.order_by(fts_rowid.desc())
        .offset(bindparam("offset"))
        .limit(bindparam("limit"))
        .subquery("chosen")
    )
    page = (
        select(request_json("sqlite", PAGE).label("json"))
        .select_from(newest.join(PAGE, PAGE.c.id == newest.c.id))
        .order_by(newest.c.fts_rowid.desc())
    )
    return PreparedQuery(page)


def _sqlite_search_page(conditions: list[ColumnElement[bool]]) -> PreparedQuery:
    """A searched page on SQLite: the matches are ranked in a subquery that carries only
    their rowids and their order, and only the page's rows are rendered, as
    ``_sqlite_page_by_rowids`` does for sorted pages. Rendered before the sort, a search
    rendered every one of its matches."""
    keys: list[ColumnElement[Any]] = [
        literal_column("approval_requests.rowid").label("row_id"),
        ApprovalRequest.created_at.label("created_at"),
        ApprovalRequest.id.label("id"),
    ]
    ranked, rank = one_page("sqlite", select(*keys), conditions, True)
    assert rank is not None  # a searched page is ranked
    chosen = ranked.add_columns(rank.element.label("rank")).subquery("chosen")
    page = (
        select(request_json("sqlite", PAGE).label("json"))
        .select_from(chosen.join(PAGE, literal_column("page.rowid") == chosen.c.row_id))
        .order_by(chosen.c.rank, chosen.c.created_at.desc(), chosen.c.id.desc())
    )
    return PreparedQuery(page)


def _sqlite_page_by_rowids(
    conditions: list[ColumnElement[bool]], indexes: Sequence[SQLiteIndex]
) -> PreparedQuery:
    """The page's rowids chosen and sorted, then only its rows rendered: SQLite computes
    the select list of every row that goes through a sorter, the rows OFFSET skips
    included, and rendering a row costs many times what sorting its rowid does."""
    chosen: Select[Any] = (
        select(literal_column("approval_requests.rowid"))
        .where(*conditions)
        .order_by(ApprovalRequest.created_at.desc(), ApprovalRequest.id.desc())
        .offset(bindparam("offset"))
        .limit(bindparam("limit"))
    )
    page = select(request_json("sqlite", PAGE).label("json")).where(
        literal_column("page.rowid").in_(chosen)
    )
    return PreparedQuery(
        page.order_by(PAGE.c.created_at.desc(), PAGE.c.id.desc()), sqlite_indexes=indexes
    )


def _sqlite_filter_index(statuses: tuple[str, ...], filters: frozenset[str]) -> list[SQLiteIndex]:
    """The index SQLite must read a filtered page through, where its planner errs.

    Why: SQLite's planner has no statistics here (signoff never runs ANALYZE), so it
    prefers the index that gives the list order without a sort, ``..._org_created``, and
    tests every row of the org's history, newest first, against the filter. A page of a
    rare value then read the whole history (``status=approved`` among an org's pending
    requests, say). Read through the filter's own index, a page reads only matching rows,
    newest first (only rows that share a ``created_at`` are sorted, for the ``id`` that
    breaks the tie), and stops at the page's end, whether few or most requests match.
    ANALYZE does not make the hints redundant: against the planner with ``sqlite_stat1``
    (this SQLite has no ``sqlite_stat4``) on an org of a million requests, the hinted
    pages of two filters and of a decided window still read in half the time or less
    (``make bench-size BENCH_ARGS="--keep DIR --planner 3"``; docs/performance.md,
    *Index hints*), and ANALYZE of that org took half a minute.

    The first that applies of: action type, source, one decided status, priority, pending
    (or an approver's inbox, which is pending requests): pending comes last, as most of
    an org's recent requests may be pending. Filters that are an OR of two sets of rows
    go by ``ListQueries`` instead (tests/storage/test_list_plans.py).
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
# The requests table again: the subqueries that choose rowids for a page.
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
        if decided_window and not only_decided_statuses(statuses)
        else [],
        statuses=_sqlite_status_set(statuses) if _reads_statuses_by_rowid(statuses) else [],
    )


def _sqlite_decided_window(filters: frozenset[str]) -> list[_RowSet]:
    """``decided_window`` as two sets SQLite can read
    through indexes: the org's requests decided in the window (by their ``decided_at``),
    and the pending ones whose deadline passed in it (by the partial index of pending
    deadlines). A pending request has no ``decided_at``, and a decided one is not pending.
    Written as the OR of the two, SQLite read the org's whole history (``ListQueries``)."""
    decided = [
        _DECIDED.c.org_id == bindparam("org_id"),
        *decided_window_bounds(_DECIDED.c.decided_at, filters),
    ]
    expiring = [
        # A literal, as in the partial index's own condition: SQLite must see that it
        # holds to read through that index.
        _EXPIRING.c.status == literal_column("'pending'"),
        _is_past_expiry(_EXPIRING),
        *decided_window_bounds(_EXPIRING.c.expires_at, filters),
        _EXPIRING.c.org_id == bindparam("org_id"),
    ]
    return [(_DECIDED, decided), (_EXPIRING, expiring)]


def _reads_statuses_by_rowid(statuses: tuple[str, ...]) -> bool:
    """Whether SQLite reads a status filter by ``_sqlite_status_set``: several statuses,
    or expired. One other status has an index that gives the list order."""
    return len(statuses) > 1 or statuses == ("expired",)


def _sqlite_status_set(statuses: tuple[str, ...]) -> list[_RowSet]:
    """The requests ``status_condition`` chooses for ``statuses``, as disjoint sets
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
        bounded_count(
            select(literal_column("1")).select_from(alias).where(*where)
        ).scalar_subquery()
        for alias, where in sets
    ]
    return PreparedQuery(
        select(functools.reduce(operator.add, counts).label("total")),
        sqlite_indexes=[_ROW_SET_INDEX[alias.name] for alias, _ in sets],
    )
