"""List pages (``GET /api/v1/approvals``, the dashboard's history) and the inbox: their
queries, prepared once per shape of filters, every filter's values parameters.

- ``pages``: reading a list page and its total (``read_page``, ``page_queries``);
- ``filters``: ``ListFilters`` as SQL conditions;
- ``paging``: totals counted up to a bound, the org's total, cursors;
- ``search``: full-text search (SQLite FTS5, PostgreSQL ``tsvector``) and number search;
- ``queries``: ``ListQueries``, what a planner answers for one shape of page;
- ``sqlite_planner``, ``postgres_planner``: how each dialect reads a page: SQLite is told
  which index to read, and a filter that is an OR of two sets of rows is read whichever
  way costs less once its total is known; PostgreSQL plans from its own statistics, with
  a choice of its own for searches;
- ``inbox``: what waits for one person's vote, most urgent first.
"""

from signoff.approvals.listing.filters import ListFilters
from signoff.approvals.listing.inbox import (
    INBOX_PRIORITIES,
    INBOX_VALUE_FILTERS,
    WAITING_COUNT_CAP,
    Inbox,
    InboxFilters,
    NumberTest,
    count_waiting,
    inbox_queries,
    read_inbox,
)
from signoff.approvals.listing.pages import page_queries, read_page
from signoff.approvals.listing.paging import (
    SEARCH_RANKED_UP_TO,
    TOTAL_EXACT_UP_TO,
    Page,
    bounded_total,
    next_cursor,
    total_bound,
)
from signoff.approvals.listing.queries import ListQueries
from signoff.approvals.listing.search import (
    MAX_SEARCH_TERMS,
    NumberSearch,
    number_searched,
    search_terms,
)

__all__ = [
    "INBOX_PRIORITIES",
    "INBOX_VALUE_FILTERS",
    "MAX_SEARCH_TERMS",
    "SEARCH_RANKED_UP_TO",
    "TOTAL_EXACT_UP_TO",
    "WAITING_COUNT_CAP",
    "Inbox",
    "InboxFilters",
    "ListFilters",
    "ListQueries",
    "NumberSearch",
    "NumberTest",
    "Page",
    "bounded_total",
    "count_waiting",
    "inbox_queries",
    "next_cursor",
    "number_searched",
    "page_queries",
    "read_inbox",
    "read_page",
    "search_terms",
    "total_bound",
]
