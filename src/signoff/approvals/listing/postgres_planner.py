"""PostgreSQL's planner of list pages. PostgreSQL plans each query from the statistics it
keeps; what is chosen here is what its planner cannot tell: a page's rows are chosen before
they are rendered, a page and its total go in one statement, and a search is read either
through its GIN index or by walking the org's history, depending on how common its words
are among the org's newest requests (``_postgres_search_count``).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    ColumnElement,
    Select,
    bindparam,
    case,
    func,
    literal,
    literal_column,
    select,
    true,
)

from signoff.approvals.json_in_sql import request_json
from signoff.approvals.listing.paging import (
    ORG_TOTAL,
    SEARCH_RANKED_UP_TO,
    bounded_count,
    one_page,
    total_bound,
)
from signoff.approvals.listing.queries import ListQueries
from signoff.approvals.listing.search import postgres_tsquery, with_search
from signoff.models import ApprovalRequest
from signoff.storage import PreparedQuery


def list_queries(conditions: list[ColumnElement[bool]], search: bool) -> ListQueries:
    """PostgreSQL's queries of a list page whose conditions are ``conditions`` (the org's
    first), searched or not."""
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
    count_query: Select[Any] = select(literal_column("1")).select_from(ApprovalRequest)
    count = PreparedQuery(
        ORG_TOTAL if len(conditions) == 1 else bounded_count(count_query.where(*conditions))
    )
    return ListQueries(
        PreparedQuery(rendered), count, page_and_total=_page_and_total(rendered, count)
    )


def list_queries_after_cursor(
    keyset: list[ColumnElement[bool]], count: PreparedQuery
) -> ListQueries:
    """PostgreSQL's queries of a page after a cursor (``keyset``: the filters' and the
    cursor's conditions); ``count``, that of the filters alone."""
    rendered = _page_rendered_after_choosing(keyset, False)
    return ListQueries(
        PreparedQuery(rendered), count, page_and_total=_page_and_total(rendered, count)
    )


def _page_rendered_after_choosing(
    conditions: list[ColumnElement[bool]], search: bool, *, ranked: bool = True
) -> Select[Any]:
    """PostgreSQL's page query: the page's rows are chosen in a subquery, and only they are
    rendered. Why: PostgreSQL evaluates the select list for every row that OFFSET then
    skips; rendering in the same query made a page far from the first render every row it
    skipped."""
    columns = select(*ApprovalRequest.__table__.columns)
    chosen, rank = one_page("postgresql", columns, conditions, search, ranked=ranked)
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


# PostgreSQL: a search is first tested on the newest ``_PROBED_ROWS`` requests of the org
# that pass its other filters; with ``_COMMON_IN_PROBED`` matches among them it is read by
# walking the org's history (at most ``_WALKED_ROWS`` requests for its count) rather than
# through the search index (``_postgres_search_count``).
_PROBED_ROWS = 2_000
_WALKED_ROWS = 20_000
# A page newest first walks the org's history when this many of the probed rows match
# (its first page then reads some thousands of rows at most); with fewer, the index finds
# the matches and they are sorted.
WALKED_PAGE_FROM = 10
# As many as the walk needs to find the bound's matches in its rows, at the same share.
_COMMON_IN_PROBED = _PROBED_ROWS * (SEARCH_RANKED_UP_TO + 1) // _WALKED_ROWS


def _postgres_match_by_walking() -> ColumnElement[bool]:
    """The search's match, written so that PostgreSQL cannot answer it from the GIN index:
    it is tested on each row that another index (the org's history, newest first) reads."""
    vector: ColumnElement[Any] = literal_column("approval_requests.search_vector")
    return vector.op("@@")(postgres_tsquery()).is_(true())


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
        .where(newest.c.vector.op("@@")(postgres_tsquery()))
    )
    if up_to is not None:
        return bounded_count(matching, up_to).scalar_subquery()
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
    indexed, _ = with_search("postgresql", every_row)
    by_index = bounded_count(indexed.where(*conditions), bound).scalar_subquery()
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
    the org's newest requests to walk its history for (``WALKED_PAGE_FROM``). The matches
    are gathered in a materialized CTE, which PostgreSQL plans on its own: in one query
    with the order and the limit, its planner walked the history anyway, misled by its
    constant estimate for a prefix."""
    rows = ApprovalRequest.__table__
    matched, _ = with_search("postgresql", select(rows.c.id, rows.c.created_at))
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
