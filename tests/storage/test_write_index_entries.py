"""What a create and a decision write into SQLite's partial request indexes.

On SQLite the decided index holds decided requests only and the inbox's index pending
requests only (migration 0054): a create writes no decided entry, a decision removes its
inbox entry rather than moving it. The queries that read those indexes name them in
``INDEXED BY`` hints, which SQLite refuses when a partial index cannot serve the query:
``test_list_plans.py`` and the inbox tests run them. The idempotency keys' unique index
holds keyed requests only (migration 0057): a create without a key writes no entry in it.
"""

from __future__ import annotations

import itertools
import sqlite3
import uuid
from contextlib import closing
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from sqlalchemy.engine import make_url

from signoff.approvals.repository import (
    _ANY_VOTE,
    _COUNT_BASED_VOTERS,
    _DELETE_VOTES,
    _VOTES_ON_REQUEST,
)
from signoff.context import AppContext
from tests.conftest import Org, create_approval

pytestmark = pytest.mark.parametrize("test_database", ["sqlite"], indirect=True)

_DECIDED = "ix_approval_requests_org_decided"
_INBOX = "ix_approval_requests_org_status_priority_created"


def _entries(database_url: str) -> dict[str, int]:
    """The entries of each of the two indexes, counted in its pages (``dbstat``)."""
    with closing(sqlite3.connect(str(make_url(database_url).database))) as connection:
        rows = connection.execute(
            "SELECT name, sum(ncell) FROM dbstat WHERE name IN (?, ?) GROUP BY name",
            (_DECIDED, _INBOX),
        )
        return {name: int(cells) for name, cells in rows}


def _entries_per_index(database_url: str) -> dict[str, int]:
    """The entries of every index of the requests table, by index (``dbstat``)."""
    with closing(sqlite3.connect(str(make_url(database_url).database))) as connection:
        rows = connection.execute(
            "SELECT s.name, sum(s.ncell) FROM dbstat AS s JOIN sqlite_master AS m "
            "ON m.name = s.name WHERE m.type = 'index' AND m.tbl_name = 'approval_requests' "
            "AND s.pagetype = 'leaf' GROUP BY s.name"
        )
        return {name: int(cells) for name, cells in rows}


async def test_only_a_keyed_create_writes_an_idempotency_key_entry(
    client: httpx.AsyncClient, org: Org, database_url: str
) -> None:
    deadline = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    counts = [sum(_entries_per_index(database_url).values())]
    for key in (None, "k-1"):
        await create_approval(client, org.member, expires_at=deadline, idempotency_key=key)
        counts.append(sum(_entries_per_index(database_url).values()))
    # The primary key, the number, the created, four filters', inbox and expiry indexes;
    # no decided entry, and a key's entry only for a keyed create.
    assert [after - before for before, after in itertools.pairwise(counts)] == [9, 10]


async def test_a_create_writes_no_decided_entry_and_a_decision_no_inbox_entry(
    client: httpx.AsyncClient, org: Org, database_url: str
) -> None:
    created = await create_approval(client, org.member)
    assert _entries(database_url) == {_DECIDED: 0, _INBOX: 1}

    response = await client.patch(
        f"/api/v1/approvals/{created['id']}",
        headers=org.admin.headers,
        json={"decision": "approve"},
    )
    assert response.status_code == 200, response.text
    assert _entries(database_url) == {_DECIDED: 1, _INBOX: 0}


def _vote_index_entries(database_url: str) -> int:
    """The entries of every index of ``votes`` (its primary key's included)."""
    with closing(sqlite3.connect(str(make_url(database_url).database))) as connection:
        names = [
            row[0]
            for row in connection.execute(
                "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'votes'"
            )
        ]
        marks = ", ".join("?" * len(names))
        (cells,) = connection.execute(
            f"SELECT coalesce(sum(ncell), 0) FROM dbstat WHERE name IN ({marks})", names
        ).fetchone()
        return int(cells)


async def test_a_vote_writes_two_index_entries(
    client: httpx.AsyncClient, org: Org, database_url: str
) -> None:
    """Its primary key's and one by request, user and step (migration 0058): the request's
    votes are read, and its delete cascades, through the latter; it also holds a user
    to one count-based vote. Three before: the request-and-time index, and the partial
    unique one of count-based votes."""
    created = await create_approval(client, org.member)
    assert _vote_index_entries(database_url) == 0
    response = await client.patch(
        f"/api/v1/approvals/{created['id']}",
        headers=org.admin.headers,
        json={"decision": "approve"},
    )
    assert response.status_code == 200, response.text
    assert _vote_index_entries(database_url) == 2


_VOTE_READS = {
    "votes on a request": _VOTES_ON_REQUEST,
    "count-based voters": _COUNT_BASED_VOTERS,
    "any vote": _ANY_VOTE,
    "votes dismissed": _DELETE_VOTES,
}


async def test_reads_of_a_requests_votes_search_the_request_index(
    ctx: AppContext, database_url: str
) -> None:
    """Every read of votes by request seeks its request in ``uq_votes_request_user_step``,
    as does the delete a request's delete cascades to (a scan of every vote each)."""
    dialect = ctx.db.write_engine.dialect
    statements = {name: query.for_sqlite(dialect).sql for name, query in _VOTE_READS.items()}
    statements["cascaded delete"] = "DELETE FROM votes WHERE request_id = ?"
    statements["inbox: voted already"] = (
        "SELECT 1 FROM votes WHERE request_id = ? AND user_id = ? AND step_id IS NULL"
    )
    statements["voters of many"] = (
        "SELECT request_id, user_id FROM votes WHERE request_id IN (?, ?) AND step_id IS NULL"
    )
    with closing(sqlite3.connect(str(make_url(database_url).database))) as connection:
        for name, sql in statements.items():
            marks = sql.count("?")
            plan = [
                row[3]
                for row in connection.execute(f"EXPLAIN QUERY PLAN {sql}", ("0" * 32,) * marks)
            ]
            assert any("USING INDEX uq_votes_request_user_step" in line for line in plan), (
                name,
                plan,
            )


async def test_the_request_index_holds_a_user_to_one_count_based_vote(
    client: httpx.AsyncClient, org: Org, database_url: str
) -> None:
    """A second count-based vote of the same user on a request is refused by the database
    itself; the same user's votes on two steps of one request are not."""
    created = await create_approval(client, org.member, required_approvals=2)
    response = await client.patch(
        f"/api/v1/approvals/{created['id']}",
        headers=org.admin.headers,
        json={"decision": "approve"},
    )
    assert response.status_code == 200, response.text
    insert = (
        "INSERT INTO votes (id, request_id, step_id, user_id, decision, created_at) "
        "SELECT ?, request_id, ?, user_id, decision, created_at FROM votes LIMIT 1"
    )
    with closing(sqlite3.connect(str(make_url(database_url).database))) as connection:
        with pytest.raises(sqlite3.IntegrityError):
            connection.execute(insert, (uuid.uuid4().hex, None))
        for _ in range(2):
            connection.execute(insert, (uuid.uuid4().hex, uuid.uuid4().hex))
