"""What a planner answers for one shape of list page: ``ListQueries``, the page's
queries, its count, and the other ways of reading the page it chooses from once the count
is known (``sqlite_planner``, ``postgres_planner``).
"""

from __future__ import annotations

from dataclasses import dataclass

from signoff.storage import PreparedQuery


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
    # (``postgres_planner``: the search count's ``probed``).
    newest_matches_sorted: PreparedQuery | None = None
    # PostgreSQL, a page that is not searched: the page and its total in one statement, one
    # row (``postgres_planner``), so one round trip instead of two.
    page_and_total: PreparedQuery | None = None

    def page_for(self, matches: int, org_total: int, reach: int) -> PreparedQuery:
        """The cheaper page for ``matches`` of ``org_total`` requests, of which the page
        skips and shows ``reach``: the walk reads at most every request that does not
        match, plus the reach; the sort reads every match. Each bound holds however the
        matches lie in time."""
        if self.page_by_sorting_matches is None or org_total - matches + reach < matches:
            return self.page
        return self.page_by_sorting_matches
