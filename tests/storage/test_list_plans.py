"""A filtered list page on SQLite reads the matching requests, not the org's history.

SQLite's planner keeps no statistics here and once read a page of a rare filter value by
walking the org's whole history (``approvals/listing/sqlite_planner.py``: ``_sqlite_filter_index``,
``ListQueries``). These tests pin what users rely on: a filtered page costs about the same
whether the org holds a few requests or thousands more that do not match, a search costs
the same whatever other orgs' requests match it, either way of reading a page gives the
same rows, and no list query scans the requests table. SQLite only: PostgreSQL's planner
works from the statistics it keeps itself.
"""

from __future__ import annotations

import asyncio
import re
import sqlite3
import uuid
from collections.abc import AsyncIterator
from contextlib import closing
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import orjson
import pytest
from sqlalchemy.dialects.sqlite.aiosqlite import SQLiteDialect_aiosqlite
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine

from signoff.approvals.listing import ListFilters, page_queries, read_page
from signoff.storage.prepared import PreparedQuery, QueryRunner
from signoff.storage.prepared import runner as runner_module
from tests.conftest import Org, create_approval

pytestmark = pytest.mark.parametrize("test_database", ["sqlite"], indirect=True)

_DIALECT = SQLiteDialect_aiosqlite()
_STEPS_PER_TICK = 100
# Requests of the org that match none of the filters of ``_shapes``, added at once.
_HISTORY = 3_000
_TABLE_SCAN = re.compile(r"^SCAN approval_requests\b")
_open_sqlite = runner_module.open_sqlite


def _shapes(assignee: str) -> dict[str, ListFilters]:
    """Filtered pages that must not read more for a longer history."""
    now = datetime.now(UTC)
    today = {"decided_after": now - timedelta(days=1)}
    return {
        "approved": ListFilters(statuses=["approved"]),
        "expired": ListFilters(statuses=["expired"]),
        "approved or cancelled": ListFilters(statuses=["approved", "cancelled"]),
        "pending or approved": ListFilters(statuses=["pending", "approved"]),
        "pending or expired": ListFilters(statuses=["pending", "expired"]),
        "pending and critical": ListFilters(statuses=["pending"], priority="critical"),
        "critical": ListFilters(priority="critical"),
        "an action type": ListFilters(action_type="rare.action"),
        "a source": ListFilters(source="rare-source"),
        "decided today": ListFilters(**today),
        "decided today, critical": ListFilters(priority="critical", **today),
        "decided in a window": ListFilters(decided_before=now + timedelta(days=1), **today),
        "an approver's inbox": ListFilters(assigned_to=uuid.UUID(assignee)),
    }


@dataclass
class CountingReads:
    """List pages read (``read_page``) through a ``QueryRunner`` whose SQLite connection
    counts the virtual machine's steps (in ticks of ``_STEPS_PER_TICK``): a measure of
    the rows read that no machine's speed changes."""

    queries: QueryRunner
    ticks: list[int]

    async def steps_of(self, org_id: str, filters: ListFilters) -> int:
        before = self.ticks[0]
        await read_page(
            self.queries, uuid.UUID(org_id), filters, now=datetime.now(UTC), offset=0, limit=20
        )
        return self.ticks[0] - before


@pytest.fixture
async def counting_reads(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[CountingReads]:
    ticks = [0]

    def tick() -> int:
        ticks[0] += 1
        return 0  # go on

    def counting_connection(url: str) -> sqlite3.Connection:
        connection = _open_sqlite(url)
        connection.set_progress_handler(tick, _STEPS_PER_TICK)
        return connection

    monkeypatch.setattr(runner_module, "open_sqlite", counting_connection)
    engine = create_async_engine(database_url)
    runner = QueryRunner(engine, database_url, busy_timeout=1.0)
    try:
        yield CountingReads(runner, ticks)
    finally:
        await runner.close()
        await engine.dispose()


def _path(database_url: str) -> str:
    return str(make_url(database_url).database)


async def _seeded(database_url: str, template_id: str, count: int, status: str) -> None:
    """``_add_history`` off the event loop: the app's background loops may be inside a
    write transaction right now, and must be able to end it while the seeding waits."""
    await asyncio.to_thread(_add_history, database_url, template_id, count, status)


def _add_history(database_url: str, template_id: str, count: int, status: str) -> None:
    """``count`` requests of the template's org, one second apart, older than it, of a
    priority, action type and source no filter here asks for: pending ones, or ones
    rejected ten days ago (before every window here). They are written out of time
    order, so that no order of rowids is also the list's."""
    with closing(sqlite3.connect(_path(database_url), timeout=60)) as connection:
        columns = [row[1] for row in connection.execute("PRAGMA table_info(approval_requests)")]
        days = 10 if status == "rejected" else 0
        shifted = (
            f"strftime('%Y-%m-%d %H:%M:%f', created_at, '-{days} days', "
            "'-' || (1 + n.i * 37 % :count) || ' seconds') || '000'"
        )
        replaced = {
            "id": "lower(hex(randomblob(16)))",
            "status": f"'{status}'",
            "priority": "'low'",
            "action_type": "'common.action'",
            "source": "'common-source'",
            "idempotency_key": "NULL",
            "expires_at": "NULL",
            "decided_at": shifted if status == "rejected" else "NULL",
            "created_at": shifted,
            "updated_at": shifted,
            # Numbers after the org's last (the source is materialized before the insert).
            "number": "(SELECT max(number) FROM approval_requests) + n.i",
        }
        select_list = ", ".join(replaced.get(name, name) for name in columns)
        connection.execute(
            f"WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < :count) "
            f"INSERT INTO approval_requests ({', '.join(columns)}) "
            f"SELECT {select_list} FROM approval_requests, n "
            "WHERE approval_requests.id = :template",
            {"count": count, "template": uuid.UUID(template_id).hex},
        )
        connection.commit()


async def _one_of_each_rare_kind(client: httpx.AsyncClient, org: Org) -> str:
    """Requests that the shapes' filters find, and the id of a plain one."""
    base = "/api/v1/approvals/"
    await create_approval(client, org.member, priority="critical")
    await create_approval(client, org.member, action_type="rare.action", source="rare-source")
    approved = await create_approval(client, org.member)
    await client.patch(
        base + approved["id"], headers=org.admin.headers, json={"decision": "approve"}
    )
    plain = await create_approval(client, org.member, priority="low")
    return str(plain["id"])


@pytest.mark.parametrize("history", ["pending", "rejected"])
async def test_a_filtered_page_reads_no_more_for_a_longer_history(
    client: httpx.AsyncClient,
    org: Org,
    database_url: str,
    counting_reads: CountingReads,
    history: str,
) -> None:
    template = await _one_of_each_rare_kind(client, org)
    shapes = _shapes(org.admin.user_id)
    before = {name: await counting_reads.steps_of(org.id, f) for name, f in shapes.items()}
    await _seeded(database_url, template, _HISTORY, history)
    after = {name: await counting_reads.steps_of(org.id, f) for name, f in shapes.items()}

    # Pending requests match these filters: with such a history their matches grow, by
    # design (pending requests nobody voted on are in every approver's inbox).
    with_pending = {"an approver's inbox", "pending or approved", "pending or expired"}
    exempt = with_pending if history == "pending" else set()
    grew = {
        name: (before[name], after[name])
        for name in before.keys() - exempt
        # Reading the 3,000 requests once costs some 300 ticks; a page that read them
        # would grow by at least that.
        if after[name] > 2 * before[name] + 50
    }
    assert not grew, f"ticks before and after {_HISTORY} more requests: {grew}"


@pytest.mark.parametrize(
    "filters",
    [
        ListFilters(search="deploy"),
        ListFilters(search="deploy gateway", statuses=["pending"]),
        ListFilters(search="deploy", priority="critical"),
    ],
    ids=["search", "search and status", "search and priority"],
)
async def test_a_search_reads_no_more_for_another_orgs_matches(
    client: httpx.AsyncClient,
    org: Org,
    other_org: Org,
    database_url: str,
    counting_reads: CountingReads,
    filters: ListFilters,
) -> None:
    """The search index holds every org's requests: a search must find the caller's org's
    matches without reading those of the others (migration 0006)."""
    ours = await create_approval(client, org.member, title="Deploy gateway", priority="critical")
    theirs = await create_approval(client, other_org.member, title="Deploy gateway")
    page, total = await read_page(
        counting_reads.queries,
        uuid.UUID(org.id),
        filters,
        now=datetime.now(UTC),
        offset=0,
        limit=20,
    )
    assert [orjson.loads(row)["id"] for row in page] == [ours["id"]] and total == 1
    before = await counting_reads.steps_of(org.id, filters)
    await _seeded(database_url, theirs["id"], _HISTORY, "pending")
    after = await counting_reads.steps_of(org.id, filters)
    assert after <= 2 * before + 50, (before, after)


def _rows(connection: sqlite3.Connection, query: PreparedQuery, values: dict[str, Any]) -> Any:
    compiled = query.for_sqlite(_DIALECT)
    return connection.execute(compiled.sql, compiled.parameters(values)).fetchall()


async def test_both_ways_of_reading_a_page_give_the_same_pages(
    client: httpx.AsyncClient, org: Org, database_url: str
) -> None:
    """Filters that are an OR of two sets of rows have two page queries, the walk and the
    sort (``ListQueries``): whichever is chosen, the pages are the same."""
    template = await _one_of_each_rare_kind(client, org)
    await _seeded(database_url, template, 45, "rejected")
    now = datetime.now(UTC)
    values: dict[str, Any] = {
        "org_id": uuid.UUID(org.id),
        "now": now,
        "limit": 20,
        "decided_after": now - timedelta(days=30),
        "decided_before": now - timedelta(days=9),
    }
    shapes = [
        (("approved", "rejected"), frozenset()),
        (("expired", "rejected"), frozenset()),
        (("pending", "rejected"), frozenset()),
        (("expired", "pending"), frozenset()),
        ((), frozenset({"decided_after"})),
        ((), frozenset({"decided_before"})),
        (("rejected", "approved"), frozenset({"decided_after", "decided_before"})),
    ]
    with closing(sqlite3.connect(_path(database_url))) as connection:
        for statuses, filters in shapes:
            queries = page_queries("sqlite", tuple(sorted(statuses)), filters, False)
            assert queries.page_by_sorting_matches is not None
            for offset in (0, 20, 40):
                values["offset"] = offset
                walked = _rows(connection, queries.page, values)
                sorted_ = _rows(connection, queries.page_by_sorting_matches, values)
                assert walked == sorted_, (statuses, sorted(filters), offset)
                assert walked or offset > 0, (statuses, sorted(filters), offset)


def test_no_list_query_scans_the_requests_table(database_url: str) -> None:
    values: dict[str, Any] = {
        "org_id": uuid.uuid4(),
        "now": datetime.now(UTC),
        "offset": 0,
        "limit": 20,
        "search_query": '"x"*',
        "search_words": '"x"*',
        "priority": "high",
        "action_type": "deploy",
        "source": "ci",
        "created_after": datetime.now(UTC),
        "created_before": datetime.now(UTC),
        "decided_after": datetime.now(UTC),
        "decided_before": datetime.now(UTC),
        "assigned_to": uuid.uuid4(),
    }
    value_filters = [frozenset({name}) for name in list(values)[6:]]
    filter_kinds = [frozenset(), *value_filters, frozenset({"created_after", "decided_before"})]
    statuses_kinds = [(), ("pending",), ("approved",), ("expired",), ("approved", "rejected")]
    with closing(sqlite3.connect(_path(database_url))) as connection:
        for statuses in statuses_kinds:
            for filters in filter_kinds:
                for search in (False, True):
                    queries = page_queries("sqlite", statuses, filters, search)
                    every = [
                        queries.page,
                        queries.count,
                        queries.page_by_sorting_matches,
                        queries.newest_matches,
                    ]
                    for query in (query for query in every if query is not None):
                        compiled = query.for_sqlite(_DIALECT)
                        plan = connection.execute(
                            f"EXPLAIN QUERY PLAN {compiled.sql}", compiled.parameters(values)
                        )
                        scans = [row[3] for row in plan if _TABLE_SCAN.match(row[3])]
                        assert not scans, (statuses, sorted(filters), search, compiled.sql)
