"""``ListQueries.page_for``: which of a list page's two queries SQLite runs."""

from __future__ import annotations

from signoff.approvals.listing import ListQueries
from signoff.storage.prepared import PreparedQuery


def test_a_page_is_walked_only_when_most_requests_match() -> None:
    walk, sort = PreparedQuery.__new__(PreparedQuery), PreparedQuery.__new__(PreparedQuery)
    queries = ListQueries(page=walk, count=walk, page_by_sorting_matches=sort)
    # The walk reads at most the 1,000 that do not match plus the reach; the sort, 50.
    assert queries.page_for(matches=50, org_total=1_050, reach=20) is sort
    assert queries.page_for(matches=1_000, org_total=1_050, reach=20) is walk
    # Half and half: the walk reads 520, the sort 500.
    assert queries.page_for(matches=500, org_total=1_000, reach=20) is sort
    assert queries.page_for(matches=0, org_total=0, reach=20) is sort
    assert ListQueries(page=walk, count=walk).page_for(0, 1_000, 20) is walk
