"""Migration 0022 on a database that holds duplicate organization names and setup
links, on SQLite and PostgreSQL: the oldest org keeps each name, later copies get the
first free suffix (and the operator is told), and an unused link of a database without
an organization still works afterwards."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command
from sqlalchemy.engine import Connection

from signoff.common.time import utcnow
from signoff.migrations import alembic_config, run_on, upgrade_to_head
from signoff.models import Organization, SetupLink
from signoff.models.base import UTCDateTime
from tests.conftest import POSTGRES_URL, _create_pg_database, _drop_pg_database

BEFORE = "0020"
LONG = "L" * 199 + "x"  # 200 characters, the most a name may have

OLD_SETUP_TOKENS = sa.table(
    "setup_tokens",
    sa.column("id", sa.Uuid()),
    sa.column("token_hash", sa.String()),
    sa.column("created_at", UTCDateTime()),
    sa.column("used_at", UTCDateTime()),
)


@pytest.fixture(params=["sqlite", "postgres"])
def database_before(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty database migrated up to the revision before names were unique."""
    if request.param == "sqlite":
        url = f"sqlite+aiosqlite:///{tmp_path / 'before.db'}"
        command.upgrade(alembic_config(url), BEFORE)
        yield url
        return
    if not POSTGRES_URL:
        pytest.skip("PostgreSQL migrations: set SIGNOFF_TEST_POSTGRES_URL=postgresql://...")
    name = f"signoff_migrations_{uuid.uuid4().hex[:12]}"
    url = asyncio.run(_create_pg_database(name))
    try:
        command.upgrade(alembic_config(url), BEFORE)
        yield url
    finally:
        asyncio.run(_drop_pg_database(name))


def _store(url: str, org_names: list[str], tokens: list[tuple[str, bool]]) -> None:
    """Orgs created in the order given; setup tokens (hash, used), oldest first."""
    start = utcnow() - timedelta(days=1)

    def store(connection: Connection) -> None:
        for index, name in enumerate(org_names):
            connection.execute(
                sa.insert(Organization.__table__).values(
                    id=uuid.uuid4(),
                    name=name,
                    emergency_stop=False,
                    created_at=start + timedelta(minutes=index),
                )
            )
        for index, (token_hash, used) in enumerate(tokens):
            at = start + timedelta(minutes=index)
            connection.execute(
                sa.insert(OLD_SETUP_TOKENS).values(
                    id=uuid.uuid4(),
                    token_hash=token_hash,
                    created_at=at,
                    used_at=at if used else None,
                )
            )
        connection.commit()

    asyncio.run(run_on(url, store))


def _read(url: str) -> tuple[list[str], list[str | None]]:
    def read(connection: Connection) -> tuple[list[str], list[str | None]]:
        names = connection.scalars(
            sa.select(Organization.name).order_by(Organization.created_at)
        ).all()
        links = connection.scalars(sa.select(SetupLink.token_hash)).all()
        return list(names), list(links)

    return asyncio.run(run_on(url, read))


def test_later_copies_of_a_name_get_a_suffix(
    database_before: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _store(
        database_before,
        ["Acme", "Acme (2)", "ACME", "Globex", "acme", LONG, LONG.upper()],
        [("a" * 64, True)],
    )
    upgrade_to_head(database_before)
    names, links = _read(database_before)
    assert (
        names
        == [
            "Acme",
            "Acme (2)",
            "ACME (3)",  # "ACME (2)" would clash with "Acme (2)", ignoring case
            "Globex",
            "acme (4)",
            LONG,
            LONG.upper()[:196] + " (2)",  # still at most 200 characters
        ]
    )
    told = capsys.readouterr().err
    assert "renamed 'ACME' to 'ACME (3)'" in told and "renamed 'acme' to 'acme (4)'" in told
    assert links == []  # orgs exist: no setup link is carried over

    # From now on, the database itself refuses a name taken in another case.
    def duplicate(connection: Connection) -> None:
        connection.execute(
            sa.insert(Organization.__table__).values(
                id=uuid.uuid4(), name="GLOBEX", emergency_stop=False, created_at=utcnow()
            )
        )

    with pytest.raises(sa.exc.IntegrityError):
        asyncio.run(run_on(database_before, duplicate))


def test_an_unused_link_of_an_empty_database_still_works(database_before: str) -> None:
    _store(database_before, [], [("a" * 64, True), ("b" * 64, False), ("c" * 64, False)])
    upgrade_to_head(database_before)
    assert _read(database_before) == ([], ["c" * 64])  # the newest unused link

    command.downgrade(alembic_config(database_before), BEFORE)

    def old_tokens(connection: Connection) -> list[str]:
        return list(connection.scalars(sa.select(OLD_SETUP_TOKENS.c.token_hash)).all())

    assert asyncio.run(run_on(database_before, old_tokens)) == ["c" * 64]
