"""The migration chain, on SQLite and PostgreSQL: up to every head, down to base and up
again; and the migrated schema is the schema the models describe."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Index, inspect, text
from sqlalchemy.engine import Connection

from signoff.migrations import (
    alembic_config,
    current_revisions,
    described_by_models,
    head_revisions,
    run_on,
    upgrade_to_head,
)
from signoff.models import Base
from tests.conftest import POSTGRES_URL, _create_pg_database, _drop_pg_database

# Triggers the models do not describe (migrations 0001 and 0005), which batch migrations
# on SQLite would drop with the table they copy.
SQLITE_SEARCH_TRIGGERS = {
    "approval_requests_fts_insert",
    "approval_requests_fts_delete",
    "approval_request_counts_insert",
    "approval_request_counts_delete",
}


@pytest.fixture(params=["sqlite", "postgres"])
def empty_database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'migrations.db'}"
        return
    if not POSTGRES_URL:
        pytest.skip("PostgreSQL migrations: set SIGNOFF_TEST_POSTGRES_URL=postgresql://...")
    name = f"signoff_migrations_{uuid.uuid4().hex[:12]}"
    url = asyncio.run(_create_pg_database(name))
    try:
        yield url
    finally:
        asyncio.run(_drop_pg_database(name))


def _tables(connection: Connection) -> set[str]:
    return set(inspect(connection).get_table_names())


def _schema_differences(connection: Connection) -> list[Any]:
    context = MigrationContext.configure(
        connection,
        opts={"compare_type": True, "include_object": described_by_models(connection.dialect.name)},
    )
    return list(compare_metadata(context, Base.metadata))


def _sqlite_triggers(url: str) -> set[str]:
    path = url.split(":///", 1)[1]
    with sqlite3.connect(path) as db:
        return {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='trigger'")}


def test_upgrade_downgrade_upgrade(empty_database: str) -> None:
    url = empty_database
    model_tables = {table.name for table in Base.metadata.sorted_tables}

    upgrade_to_head(url)
    assert asyncio.run(current_revisions(url)) == head_revisions()
    assert model_tables <= asyncio.run(run_on(url, _tables))

    command.downgrade(alembic_config(url), "base")
    assert asyncio.run(current_revisions(url)) == frozenset()
    assert asyncio.run(run_on(url, _tables)) <= {"alembic_version"}
    if url.startswith("sqlite"):
        assert _sqlite_triggers(url) == set()

    upgrade_to_head(url)
    assert asyncio.run(current_revisions(url)) == head_revisions()
    assert asyncio.run(run_on(url, _schema_differences)) == []
    # Running it again at head changes nothing.
    upgrade_to_head(url)
    assert asyncio.run(current_revisions(url)) == head_revisions()


def test_models_match_the_migrated_schema(empty_database: str) -> None:
    upgrade_to_head(empty_database)
    differences = asyncio.run(run_on(empty_database, _schema_differences))
    assert differences == [], "models and migrations disagree; add a migration:\n" + "\n".join(
        map(str, differences)
    )


def test_the_comparison_leaves_out_what_a_model_makes_on_another_dialect_alone() -> None:
    """It reads the dialect from the object's ``info`` (``models.base.only_on``), the
    public place, not from ``ddl_if``'s private state."""
    index = Index("ix_made_on_postgresql_alone", "a", info={"dialect": "postgresql"})
    assert not described_by_models("sqlite")(index, index.name, "index", False, None)
    assert described_by_models("postgresql")(index, index.name, "index", False, None)


def test_full_text_search_objects_survive_every_migration(empty_database: str) -> None:
    """Batch migrations on SQLite copy tables and drop their triggers; search must live on."""
    url = empty_database
    upgrade_to_head(url)
    if url.startswith("sqlite"):
        assert _sqlite_triggers(url) >= SQLITE_SEARCH_TRIGGERS
        return

    def search_objects(connection: Connection) -> tuple[bool, bool]:
        columns = {c["name"] for c in inspect(connection).get_columns("approval_requests")}
        indexes = connection.execute(
            text("SELECT 1 FROM pg_indexes WHERE indexname = 'ix_approval_requests_search'")
        ).first()
        return "search_vector" in columns, indexes is not None

    assert asyncio.run(run_on(url, search_objects)) == (True, True)


def test_request_counts_start_from_the_requests_already_stored(tmp_path: Path) -> None:
    """Upgrading a database that holds requests: unfiltered list totals stay exact."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'counts.db'}"
    command.upgrade(alembic_config(url), "0004")
    orgs = [uuid.uuid4().hex, uuid.uuid4().hex]
    path = url.split(":///", 1)[1]
    for org_id, how_many in zip(orgs, (3, 1), strict=True):
        _insert_requests(path, org_id, how_many)
    upgrade_to_head(url)
    with sqlite3.connect(path) as db:
        counts = dict(db.execute("SELECT org_id, total FROM approval_request_counts"))
        assert counts == {orgs[0]: 3, orgs[1]: 1}
        db.execute("DELETE FROM approval_requests WHERE org_id = ?", (orgs[1],))
        counts = dict(db.execute("SELECT org_id, total FROM approval_request_counts"))
    assert counts == {orgs[0]: 3, orgs[1]: 0}


def test_postgres_request_counts_start_from_the_requests_already_stored() -> None:
    """Upgrading a PostgreSQL database that holds requests to 0018: each org's count is
    its requests, and later writes, a delete and a truncation keep it so."""
    if not POSTGRES_URL:
        pytest.skip("PostgreSQL migrations: set SIGNOFF_TEST_POSTGRES_URL=postgresql://...")
    name = f"signoff_migrations_{uuid.uuid4().hex[:12]}"
    url = asyncio.run(_create_pg_database(name))
    orgs = [uuid.uuid4(), uuid.uuid4()]

    def insert(connection: Connection, org_id: uuid.UUID, how_many: int) -> None:
        # As an older version stored them; the org and connection rows do not matter here.
        connection.execute(text("SET session_replication_role = replica"))
        connection.execute(
            text(
                "INSERT INTO approval_requests (id, org_id, connection_id, title, description, "
                "status, priority, metadata, required_approvals, current_approvals, "
                "is_sequential, created_at, updated_at, comments_count, has_steps) "
                "SELECT gen_random_uuid(), :org, gen_random_uuid(), 't', 'd', 'pending', "
                "'low', '{}', 1, 0, false, now(), now(), 0, false "
                "FROM generate_series(1, :n)"
            ),
            {"org": org_id, "n": how_many},
        )
        connection.execute(text("SET session_replication_role = origin"))
        connection.commit()

    def counts(connection: Connection) -> dict[uuid.UUID, int]:
        rows = connection.execute(
            text("SELECT org_id, sum(total) FROM approval_request_counts GROUP BY org_id")
        )
        return {row[0]: int(row[1]) for row in rows}

    def then(statement: str) -> Callable[[Connection], dict[uuid.UUID, int]]:
        def run(connection: Connection) -> dict[uuid.UUID, int]:
            connection.execute(text(statement), {"org": orgs[1]})
            connection.commit()
            return counts(connection)

        return run

    try:
        command.upgrade(alembic_config(url), "0017")
        for org_id, how_many in zip(orgs, (3, 1), strict=True):
            asyncio.run(run_on(url, lambda c, o=org_id, n=how_many: insert(c, o, n)))
        upgrade_to_head(url)
        assert asyncio.run(run_on(url, counts)) == {orgs[0]: 3, orgs[1]: 1}
        delete = then("DELETE FROM approval_requests WHERE org_id = :org")
        assert asyncio.run(run_on(url, delete)) == {orgs[0]: 3, orgs[1]: 0}
        assert asyncio.run(run_on(url, then("TRUNCATE approval_requests CASCADE"))) == {}
    finally:
        asyncio.run(_drop_pg_database(name))


def test_search_by_org_indexes_the_requests_already_stored(tmp_path: Path) -> None:
    """0006 fills its search table from the requests stored before it, with their org and
    creation time; going back to 0005 restores 0001's table, every request in it."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'search.db'}"
    command.upgrade(alembic_config(url), "0005")
    path = url.split(":///", 1)[1]
    ours, theirs = uuid.uuid4().hex, uuid.uuid4().hex
    _insert_requests(path, ours, 2, title="Rotate vendor keys")
    _insert_requests(path, theirs, 1, title="Rotate vendor keys")
    upgrade_to_head(url)
    with sqlite3.connect(path) as db:
        indexed = set(
            db.execute(
                "SELECT request_id, org_id, created_at FROM approval_requests_fts "
                "WHERE approval_requests_fts MATCH ?",
                (f'{{org_id}} : "{ours}" AND {{title description}} : "rotate"*',),
            )
        )
        stored = set(
            db.execute(
                "SELECT id, org_id, created_at FROM approval_requests WHERE org_id = ?", (ours,)
            )
        )
    assert indexed == stored and len(stored) == 2

    command.downgrade(alembic_config(url), "0005")
    with sqlite3.connect(path) as db:
        found = db.execute(
            "SELECT count(*) FROM approval_requests_fts WHERE approval_requests_fts MATCH 'rotate'"
        ).fetchone()
        columns = [row[1] for row in db.execute("PRAGMA table_info(approval_requests_fts)")]
    assert found == (3,) and columns == ["title", "description", "request_id"]


def test_search_queue_is_indexed_when_going_back_to_0006(tmp_path: Path) -> None:
    """0007 queues new requests for the search index, which signoff's commits catch up;
    going back to 0006 indexes what a program that does not catch up left queued, and new
    requests are indexed as they are inserted again."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'queue.db'}"
    command.upgrade(alembic_config(url), "0007")
    path = url.split(":///", 1)[1]
    org_id = uuid.uuid4().hex
    match = "SELECT count(*) FROM approval_requests_fts WHERE approval_requests_fts MATCH 'rotate'"
    _insert_requests(path, org_id, 2, title="Rotate vendor keys")
    with sqlite3.connect(path) as db:
        assert db.execute(match).fetchone() == (0,)
        assert db.execute("SELECT count(*) FROM approval_requests_fts_pending").fetchone() == (2,)

    command.downgrade(alembic_config(url), "0006")
    _insert_requests(path, org_id, 1, title="Rotate vendor keys")
    with sqlite3.connect(path) as db:
        found = db.execute(match).fetchone()
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
    assert found == (3,) and "approval_requests_fts_pending" not in tables


def test_sqlite_upgrades_started_together_wait_for_each_other(tmp_path: Path) -> None:
    """Every ``signoff`` command migrates a SQLite file itself, so ``serve`` and ``worker``
    started together both upgrade it: each must start, and the upgrade happen once."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'together.db'}"
    command.upgrade(alembic_config(url), "0005")
    path = url.split(":///", 1)[1]
    # Enough requests that 0006's rebuild of the search index takes a while.
    _insert_requests(path, uuid.uuid4().hex, 20_000, title="Rotate vendor keys")
    env = {key: value for key, value in os.environ.items() if not key.startswith("SIGNOFF_")}
    env["SIGNOFF_DATABASE_URL"] = url
    signoff = str(Path(sys.executable).with_name("signoff"))
    upgrades = [
        subprocess.Popen(
            [signoff, "db", "upgrade"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        for _ in range(4)
    ]
    outputs = [upgrade.communicate(timeout=120)[0].decode() for upgrade in upgrades]
    assert [upgrade.returncode for upgrade in upgrades] == [0] * 4, "\n".join(outputs)
    assert asyncio.run(current_revisions(url)) == head_revisions()
    with sqlite3.connect(path) as db:
        indexed = db.execute("SELECT count(*) FROM approval_requests_fts").fetchone()
    assert indexed == (20_000,)


def test_a_sqlite_upgrade_that_fails_leaves_the_database_as_it_was(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'failed.db'}"
    command.upgrade(alembic_config(url), "0005")
    path = url.split(":///", 1)[1]
    _insert_requests(path, uuid.uuid4().hex, 3, title="Rotate vendor keys")
    with sqlite3.connect(path) as db:
        # 0006's work is done by the time alembic records its revision: fail there.
        db.execute(
            "CREATE TRIGGER refuse_revision BEFORE UPDATE ON alembic_version "
            "BEGIN SELECT RAISE(ABORT, 'refused'); END"
        )
    with pytest.raises(Exception, match="refused"):
        upgrade_to_head(url)
    assert asyncio.run(current_revisions(url)) == frozenset({"0005"})
    with sqlite3.connect(path) as db:
        columns = [row[1] for row in db.execute("PRAGMA table_info(approval_requests_fts)")]
        found = db.execute(
            "SELECT count(*) FROM approval_requests_fts WHERE approval_requests_fts MATCH 'rotate'"
        ).fetchone()
    assert columns == ["title", "description", "request_id"] and found == (3,)


def _insert_requests(path: str, org_id: str, how_many: int, title: str = "t") -> None:
    """Requests written straight into the table, as an older version stored them."""
    with sqlite3.connect(path) as db:  # foreign keys off: only the requests matter here
        for i in range(how_many):
            db.execute(
                "INSERT INTO approval_requests (id, org_id, connection_id, title, "
                "description, status, priority, metadata, required_approvals, "
                "current_approvals, is_sequential, created_at, updated_at, "
                "comments_count, has_steps) VALUES (?, ?, ?, ?, 'd', 'pending', 'low', "
                "'{}', 1, 0, 0, ?, '2026-01-01 00:00:00', 0, 0)",
                (uuid.uuid4().hex, org_id, uuid.uuid4().hex, title, f"2026-01-0{i + 1} 00:00:00"),
            )
