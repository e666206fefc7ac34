"""A list page (``GET /api/v1/approvals``, the dashboard's history): read in one
snapshot with its total, through the queries its dialect's planner prepared once per
shape of filters (which statuses, which other filters, whether searching): every
filter's values are parameters.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, select

from signoff.approvals.json_in_sql import request_json
from signoff.approvals.listing import postgres_planner, sqlite_planner
from signoff.approvals.listing.filters import (
    VALUE_FILTERS,
    ListFilters,
    filter_conditions,
    filter_params,
)
from signoff.approvals.listing.paging import (
    UNFILTERED_TOTAL,
    after_cursor,
    bounded_total,
    total_bound,
    total_of,
)
from signoff.approvals.listing.queries import ListQueries
from signoff.approvals.listing.search import (
    number_searched,
    search_query,
    search_terms,
    search_words,
    sqlite_word_forms,
)
from signoff.models import ApprovalRequest
from signoff.storage import PreparedQuery, QueryRunner


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
    its JSON object by the database (``json_in_sql.py``), and their total; read in one
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
    params = filter_params(org_id, filters, now)
    params["number"] = number
    statuses = tuple(sorted(set(filters.statuses or ())))
    shape = frozenset(name for name in VALUE_FILTERS if name in params)
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
            *filter_conditions(statuses, filters),
        )
    )


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
    params = filter_params(org_id, filters, now) | {"offset": offset, "limit": limit}
    if filters.search is not None:
        terms = search_terms(filters.search)
        if not terms:
            return [], 0
        forms = None
        if queries.dialect_name == "sqlite":
            forms = [await sqlite_word_forms(queries, term) for term in terms]
        params["search_query"] = search_query(queries.dialect_name, terms, org_id, forms)
        params["search_words"] = search_words(terms, forms)
    if filters.after is not None:
        params["after_id"] = filters.after
    shape = _Shape(
        tuple(sorted(set(filters.statuses or ()))),
        frozenset(name for name in VALUE_FILTERS if name in params),
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
            if total_of(counted[0]) <= total_bound(True):
                return [(plan.page, params)]
            sorted_ = plan.newest_matches_sorted
            if (
                sorted_ is not None
                and int(counted[0][0].probed) < postgres_planner.WALKED_PAGE_FROM
            ):
                return [(sorted_, params)]
            return [(newest, params)]

        totals, rows = await queries.snapshot_read_then_choose(
            [(plan.count, params)], search_page_for, plan_each_call=planned_per_call
        )
        return [row.json for row in rows], total_of(totals)
    if (page_and_total := plan.page_and_total) is not None:
        ((row,),) = await queries.snapshot_read(
            (page_and_total, params), plan_each_call=planned_per_call
        )
        return list(row.rendered), int(row.total)
    if plan.page_by_sorting_matches is None:
        rows, totals = await queries.snapshot_read(
            (plan.page, params), (plan.count, params), plan_each_call=planned_per_call
        )
        return [row.json for row in rows], total_of(totals)

    def page_for(counted: list[list[Any]]) -> list[tuple[PreparedQuery, Mapping[str, Any]]]:
        matches, org_total = total_of(counted[0]), total_of(counted[1])
        _, exact = bounded_total(matches)
        if not exact:
            # Counting stopped: many matches, which a walk in list order meets soon.
            return [(plan.page, params)]
        return [(plan.page_for(matches, org_total, offset + limit), params)]

    totals, _, rows = await queries.snapshot_read_then_choose(
        [(plan.count, params), (UNFILTERED_TOTAL, params)],
        page_for,
        plan_each_call=planned_per_call,
    )
    return [row.json for row in rows], total_of(totals)


@dataclass(frozen=True)
class _Shape:
    """What a list query is prepared for: the statuses, the other filters, searching."""

    statuses: tuple[str, ...]
    filters: frozenset[str]
    search: bool


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
    conditions = [
        ApprovalRequest.org_id == bindparam("org_id"),
        *filter_conditions(statuses, filters),
    ]
    if after:
        # The count is that of the filters alone; the page starts after the cursor.
        counted = page_queries(dialect, statuses, filters, search, False)
        if search:  # pragma: no cover - the endpoint refuses a cursor with a search
            raise ValueError("a search is ordered by rank: it has no cursor")
        keyset = [*conditions, *after_cursor()]
        if dialect == "postgresql":
            return postgres_planner.list_queries_after_cursor(keyset, counted.count)
        return sqlite_planner.list_queries_after_cursor(keyset, counted.count)
    if dialect == "postgresql":
        return postgres_planner.list_queries(conditions, search)
    return sqlite_planner.list_queries(statuses, filters, conditions, search)
