"""Migration 0024 on a database that holds requests: each org's requests are numbered 1,
2, 3 ... in the order they were created, and the org's next number follows the last, on
SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from sqlalchemy import text
from sqlalchemy.engine import Connection

from signoff.migrations import alembic_config, run_on, upgrade_to_head
from tests.conftest import POSTGRES_URL, _create_pg_database, _drop_pg_database

# (org, created_at) of the stored requests, written out of time order.
STORED = [
    ("a", "2026-01-03 00:00:00"),
    ("b", "2026-01-02 00:00:00"),
    ("a", "2026-01-01 00:00:00"),
    ("a", "2026-01-02 00:00:00"),
    ("b", "2026-01-01 00:00:00"),
]


@pytest.fixture(params=["sqlite", "postgres"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'numbers.db'}"
        return
    if not POSTGRES_URL:
        pytest.skip("PostgreSQL migrations: set SIGNOFF_TEST_POSTGRES_URL=postgresql://...")
    name = f"signoff_migrations_{uuid.uuid4().hex[:12]}"
    url = asyncio.run(_create_pg_database(name))
    try:
        yield url
    finally:
        asyncio.run(_drop_pg_database(name))


def _insert(connection: Connection, orgs: dict[str, uuid.UUID]) -> dict[uuid.UUID, tuple[str, str]]:
    """The requests of ``STORED``, as 0020 stored them: their ids, by (org, created_at)."""
    postgres = connection.dialect.name == "postgresql"
    if postgres:  # the org and connection rows do not matter here
        connection.execute(text("SET session_replication_role = replica"))
    written = {}
    for org, created_at in STORED:
        request_id = uuid.uuid4()
        written[request_id] = (org, created_at)
        connection.execute(
            text(
                "INSERT INTO approval_requests (id, org_id, connection_id, title, description, "
                "status, priority, metadata, required_approvals, current_approvals, "
                "is_sequential, created_at, updated_at, comments_count, has_steps) "
                "VALUES (:id, :org, :connection, 't', 'd', 'pending', 'low', '{}', 1, 0, "
                ":no, :created, :created, 0, :no)"
            ),
            {
                "id": request_id if postgres else request_id.hex,
                "org": orgs[org] if postgres else orgs[org].hex,
                "connection": uuid.uuid4() if postgres else uuid.uuid4().hex,
                "created": datetime.fromisoformat(created_at).replace(tzinfo=UTC)
                if postgres
                else created_at,
                "no": False,
            },
        )
    if postgres:
        connection.execute(text("SET session_replication_role = origin"))
    connection.commit()
    return written


def _numbers(connection: Connection) -> dict[uuid.UUID, int]:
    rows = connection.execute(text("SELECT id, number FROM approval_requests"))
    return {uuid.UUID(str(row[0])): row[1] for row in rows}


def _next_number(connection: Connection, org_id: uuid.UUID) -> Any:
    """What a create in the org would take next (``ApprovalRepository``'s way)."""
    if connection.dialect.name == "postgresql":
        drawn = connection.execute(
            text("SELECT signoff_next_request_number(:org)"), {"org": org_id}
        )
        return drawn.scalar()
    last = connection.execute(
        text("SELECT issued FROM approval_request_counts WHERE org_id = :org"),
        {"org": org_id.hex},
    )
    return (last.scalar() or 0) + 1  # no row: the org has no request yet


def test_stored_requests_are_numbered_in_creation_order_per_org(database: str) -> None:
    orgs = {"a": uuid.uuid4(), "b": uuid.uuid4()}
    command.upgrade(alembic_config(database), "0020")
    written = asyncio.run(run_on(database, lambda c: _insert(c, orgs)))
    upgrade_to_head(database)

    numbers = asyncio.run(run_on(database, _numbers))
    by_org: dict[str, list[tuple[str, int]]] = {}
    for request_id, (org, created_at) in written.items():
        by_org.setdefault(org, []).append((created_at, numbers[request_id]))
    assert sorted(by_org["a"]) == [
        ("2026-01-01 00:00:00", 1),
        ("2026-01-02 00:00:00", 2),
        ("2026-01-03 00:00:00", 3),
    ]
    assert sorted(by_org["b"]) == [("2026-01-01 00:00:00", 1), ("2026-01-02 00:00:00", 2)]
    assert asyncio.run(run_on(database, lambda c: _next_number(c, orgs["a"]))) == 4
    assert asyncio.run(run_on(database, lambda c: _next_number(c, orgs["b"]))) == 3
    assert asyncio.run(run_on(database, lambda c: _next_number(c, uuid.uuid4()))) == 1

    # Down to 0020 and up again: the numbers are given again, the same.
    command.downgrade(alembic_config(database), "0020")
    upgrade_to_head(database)
    assert asyncio.run(run_on(database, _numbers)) == numbers
