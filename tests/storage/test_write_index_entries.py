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
from contextlib import closing
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from sqlalchemy.engine import make_url

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
