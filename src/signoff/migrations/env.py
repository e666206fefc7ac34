"""Alembic environment: one migration chain for SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio

from alembic import context
from sqlalchemy import text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import create_async_engine

from signoff.migrations import is_described_by_models
from signoff.models import Base

# Any number from our namespace; concurrent `db upgrade` runs on PostgreSQL queue on it.
MIGRATION_LOCK_ID = 0x5160FF


def _run(connection: Connection) -> None:
    is_sqlite = connection.dialect.name == "sqlite"
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        render_as_batch=is_sqlite,
        compare_type=True,
        include_object=is_described_by_models,
    )
    with context.begin_transaction():
        if not is_sqlite:
            connection.execute(text("SELECT pg_advisory_xact_lock(:id)"), {"id": MIGRATION_LOCK_ID})
        context.run_migrations()


async def _run_async(url: str) -> None:
    engine = create_async_engine(url)
    try:
        async with engine.connect() as connection:
            await connection.run_sync(_run)
    finally:
        await engine.dispose()


def run() -> None:
    connection = context.config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    asyncio.run(_run_async(context.config.get_main_option("sqlalchemy.url") or ""))


if context.is_offline_mode():
    raise SystemExit("offline migrations are not supported; run `signoff db upgrade`")
run()
