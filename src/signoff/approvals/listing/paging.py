"""Totals and cursors of a list page: how far a total is counted exactly, the counts
that stop one past that bound, the org's total kept by triggers, the keyset cursor, and
one page of a query in list order (newest first, or best match first when searching).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from sqlalchemy import (
    ColumnElement,
    Integer,
    Select,
    Uuid,
    bindparam,
    column,
    func,
    literal_column,
    or_,
    select,
    table,
)
from sqlalchemy.orm import aliased

from signoff.approvals.listing.search import with_search
from signoff.models import ApprovalRequest
from signoff.storage import PreparedQuery

# Each org's number of requests, kept by triggers: on SQLite one row per org (migration
# 0005), on PostgreSQL a few rows per org whose sum it is (0018: concurrent creates add to
# different rows, so none waits on another's row lock).
_REQUEST_COUNTS = table(
    "approval_request_counts", column("org_id", Uuid()), column("total", Integer())
)
# The org's total, summed: nothing of its history is read.
ORG_TOTAL: Select[Any] = select(
    func.coalesce(func.sum(_REQUEST_COUNTS.c.total), literal_column("0")).label("total")
).where(_REQUEST_COUNTS.c.org_id == bindparam("org_id"))
UNFILTERED_TOTAL = PreparedQuery(ORG_TOTAL)
# A page's total is counted exactly up to this many matches; past it, counting stops and
# the total reads as this bound (``Page.total_is_exact`` false): a page of a large org
# never counts its whole history (docs/api.md, *Totals and cursors*).
TOTAL_EXACT_UP_TO = 10_000
# A search ranks its matches, best first, when it has at most this many; with more, it
# lists them newest first, and its total reads this bound (not exact). Why: ranking reads
# and scores every match, and a word found in a large share of a large org's requests
# has nearly as many matches as the org has requests; counting a search's matches also
# costs more per match than counting a filter's (docs/api.md of the list,
# docs/performance.md).
SEARCH_RANKED_UP_TO = 500


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


def total_of(rows: Sequence[Any]) -> int:
    """The ``total`` of a count's one row (0 if it answered none)."""
    return int(rows[0].total) if rows else 0


def bounded_count(rows: Select[Any], up_to: int | None = None) -> Select[Any]:
    """How many rows ``rows`` (a select of a constant) has, counting at most one past
    ``up_to`` (``TOTAL_EXACT_UP_TO`` if not given; ``bounded_total``)."""
    bound = TOTAL_EXACT_UP_TO if up_to is None else up_to
    chosen = rows.limit(bound + 1).subquery("counted")
    return select(func.count().label("total")).select_from(chosen)


def after_cursor() -> list[ColumnElement[bool]]:
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


def one_page(
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
        query, rank = with_search(dialect, query, ranked=ranked)
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


# The requests table again, under the name ``page``: a page's rows rendered once they are
# chosen (by rowid or id, in a subquery).
PAGE = ApprovalRequest.__table__.alias("page")
