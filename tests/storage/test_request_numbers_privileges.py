"""PostgreSQL request numbers under an application role that may only read and write
rows (no CREATE on the schema): an org's first request makes its sequence, and deleting
the org drops it, both through the migrated functions running as their owner."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import make_url, text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import create_async_engine

from signoff.migrations import run_on, upgrade_to_head
from tests.conftest import POSTGRES_URL, _create_pg_database, _drop_pg_database


@pytest.fixture
def migrated_url() -> Iterator[str]:
    if not POSTGRES_URL:
        pytest.skip("PostgreSQL only: set SIGNOFF_TEST_POSTGRES_URL=postgresql://...")
    name = f"signoff_privileges_{uuid.uuid4().hex[:12]}"
    url = asyncio.run(_create_pg_database(name))
    try:
        upgrade_to_head(url)
        yield url
    finally:
        asyncio.run(_drop_pg_database(name))


def _app_role(connection: Connection, role: str) -> None:
    """A role granted rows only, as an operator would give the application."""
    connection.execute(text(f'CREATE ROLE "{role}" LOGIN'))
    connection.execute(text("REVOKE CREATE ON SCHEMA public FROM PUBLIC"))
    connection.execute(text(f'GRANT USAGE ON SCHEMA public TO "{role}"'))
    connection.execute(
        text(f'GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO "{role}"')
    )
    connection.execute(text(f'GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO "{role}"'))
    connection.commit()


async def _as_role(url: str, role: str, org: uuid.UUID) -> tuple[list[int], int]:
    engine = create_async_engine(make_url(url).set(username=role, password=None))
    try:
        async with engine.begin() as connection:
            await connection.execute(
                text("INSERT INTO organizations (id, name, emergency_stop, created_at) "
                     "VALUES (:id, 'Numbered', false, now())"),
                {"id": org},
            )  # fmt: skip
            numbers = [
                (
                    await connection.execute(
                        text("SELECT signoff_next_request_number(:o)"), {"o": org}
                    )
                ).scalar_one()
                for _ in range(3)
            ]
        async with engine.begin() as connection:
            await connection.execute(text("DELETE FROM organizations WHERE id = :id"), {"id": org})
            left = (
                await connection.execute(
                    text("SELECT count(*) FROM pg_class WHERE relkind = 'S' AND relname = :n"),
                    {"n": "signoff_request_number_" + org.hex},
                )
            ).scalar_one()
        return numbers, int(left)
    finally:
        await engine.dispose()


def test_an_app_role_without_create_numbers_requests_and_deletes_orgs(migrated_url: str) -> None:
    role = f"signoff_app_{uuid.uuid4().hex[:8]}"
    asyncio.run(run_on(migrated_url, lambda c: _app_role(c, role)))
    try:
        numbers, sequences_left = asyncio.run(_as_role(migrated_url, role, uuid.uuid4()))
        assert numbers == [1, 2, 3]
        assert sequences_left == 0
    finally:
        asyncio.run(run_on(migrated_url, lambda c: _drop_role(c, role)))


def _drop_role(connection: Connection, role: str) -> None:
    connection.execute(text(f'DROP OWNED BY "{role}"'))
    connection.execute(text(f'DROP ROLE "{role}"'))
    connection.commit()
