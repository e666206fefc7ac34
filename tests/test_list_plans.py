"""A filtered list page on SQLite reads the matching requests, not the org's history.

SQLite's planner keeps no statistics here and once read a page of a rare filter value by
walking the org's whole history (``approvals/repository.py``, ``_sqlite_indexes``). These
tests pin what users rely on: a filtered page costs about the same whether the org holds
a few requests or thousands, and no list query scans the requests table. SQLite only:
PostgreSQL's planner works from the statistics it keeps itself.
"""

from __future__ import annotations

import re
import sqlite3
import uuid
from collections.abc import Iterator
from contextlib import closing, contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy.dialects.sqlite.aiosqlite import SQLiteDialect_aiosqlite
from sqlalchemy.engine import make_url

from signoff.approvals.repository import _page_queries
from signoff.prepared import PreparedQuery
from tests.conftest import Org, create_approval

pytestmark = pytest.mark.parametrize("test_database", ["sqlite"], indirect=True)

_DIALECT = SQLiteDialect_aiosqlite()
_STEPS_PER_TICK = 100
# Requests of the org that match none of the filters below, added in one statement.
_HISTORY = 3_000
_TABLE_SCAN = re.compile(r"^SCAN approval_requests\b")


# (statuses, filters) of each filtered page whose reads must not grow with the history.
_SHAPES: list[tuple[tuple[str, ...], frozenset[str]]] = [
    (("approved",), frozenset()),
    (("pending",), frozenset({"priority"})),
    ((), frozenset({"priority"})),
    ((), frozenset({"action_type"})),
    ((), frozenset({"source"})),
    ((), frozenset({"decided_after"})),
    ((), frozenset({"decided_after", "decided_before"})),
    ((), frozenset({"decided_after", "priority"})),
    ((), frozenset({"assigned_to"})),
]


def _path(database_url: str) -> str:
    return str(make_url(database_url).database)


def _values(org_id: str, assignee: str) -> dict[str, Any]:
    now = datetime.now(UTC)
    return {
        "org_id": uuid.UUID(org_id),
        "offset": 0,
        "limit": 20,
        "now": now,
        "priority": "critical",
        "action_type": "rare.action",
        "source": "rare-source",
        "created_after": now - timedelta(days=1),
        "created_before": now + timedelta(days=1),
        "decided_after": now - timedelta(days=1),
        "decided_before": now + timedelta(days=1),
        "assigned_to": uuid.UUID(assignee),
    }


@contextmanager
def _counting_steps(connection: sqlite3.Connection) -> Iterator[list[int]]:
    """Counts SQLite's virtual-machine steps (in ticks of ``_STEPS_PER_TICK``) meanwhile:
    a measure of the rows read that no machine's speed changes."""
    ticks = [0]

    def tick() -> int:
        ticks[0] += 1
        return 0  # go on

    connection.set_progress_handler(tick, _STEPS_PER_TICK)
    try:
        yield ticks
    finally:
        connection.set_progress_handler(None, 0)


def _run(connection: sqlite3.Connection, query: PreparedQuery, values: dict[str, Any]) -> list[Any]:
    compiled = query.for_sqlite(_DIALECT)
    return connection.execute(compiled.sql, compiled.parameters(values)).fetchall()


def _steps_of_each_shape(database_url: str, values: dict[str, Any]) -> dict[str, int]:
    steps = {}
    with closing(sqlite3.connect(_path(database_url))) as connection:
        for statuses, filters in _SHAPES:
            with _counting_steps(connection) as ticks:
                for query in _page_queries("sqlite", statuses, filters, False):
                    _run(connection, query, values)
            steps[f"{statuses} {sorted(filters)}"] = ticks[0]
    return steps


def _add_history(database_url: str, template_id: str, count: int, status: str) -> None:
    """``count`` requests of the template's org, one second apart, older than it, of a
    priority, action type and source no filter here asks for: pending ones, or ones
    rejected ten days ago (before every window here)."""
    with closing(sqlite3.connect(_path(database_url))) as connection:
        columns = [row[1] for row in connection.execute("PRAGMA table_info(approval_requests)")]
        days = 10 if status == "rejected" else 0
        shifted = (
            f"strftime('%Y-%m-%d %H:%M:%f', created_at, '-{days} days', "
            "'-' || n.i || ' seconds') || '000'"
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
        }
        select_list = ", ".join(replaced.get(name, name) for name in columns)
        connection.execute(
            f"WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?) "
            f"INSERT INTO approval_requests ({', '.join(columns)}) "
            f"SELECT {select_list} FROM approval_requests, n WHERE approval_requests.id = ?",
            (count, uuid.UUID(template_id).hex),
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
    client: httpx.AsyncClient, org: Org, database_url: str, history: str
) -> None:
    template = await _one_of_each_rare_kind(client, org)
    values = _values(org.id, org.admin.user_id)
    before = _steps_of_each_shape(database_url, values)
    _add_history(database_url, template, _HISTORY, history)
    after = _steps_of_each_shape(database_url, values)

    # Pending requests nobody voted on are in every approver's inbox: that page's
    # matches grow with such a history, by design.
    exempt = {"() ['assigned_to']"} if history == "pending" else set()
    grew = {
        shape: (before[shape], after[shape])
        for shape in before.keys() - exempt
        # Reading the 3,000 requests once costs some 300 ticks; a page that read them
        # would grow by at least that.
        if after[shape] > 2 * before[shape] + 50
    }
    assert not grew, f"steps before and after {_HISTORY} more requests: {grew}"


def test_no_list_query_scans_the_requests_table(database_url: str) -> None:
    values = _values(str(uuid.uuid4()), str(uuid.uuid4()))
    statuses_kinds = [(), ("pending",), ("approved",), ("expired",), ("approved", "rejected")]
    filter_kinds = [
        frozenset(),
        *[frozenset({name}) for name in values if name not in {"org_id", "offset", "limit", "now"}],
    ]
    filter_kinds += [frozenset({"created_after", "decided_before"})]
    with closing(sqlite3.connect(_path(database_url))) as connection:
        for statuses in statuses_kinds:
            for filters in filter_kinds:
                for search in (False, True):
                    for query in _page_queries("sqlite", statuses, filters, search):
                        compiled = query.for_sqlite(_DIALECT)
                        params = compiled.parameters({**values, "search_query": '"x"*'})
                        plan = connection.execute(f"EXPLAIN QUERY PLAN {compiled.sql}", params)
                        scans = [row[3] for row in plan if _TABLE_SCAN.match(row[3])]
                        assert not scans, (statuses, sorted(filters), search, compiled.sql)
