"""Alembic environment: one migration chain for SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import warnings

from alembic import context
from sqlalchemy import exc, text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import create_async_engine

from signoff.migrations import described_by_models
from signoff.models import Base

# SQLite's batch migrations reflect the tables a rebuilt one refers to; SQLAlchemy cannot
# reflect the expression index on ``lower(organizations.name)`` and says so. Those tables
# are read, never rebuilt, so the index stays as it is: the warning would only alarm an
# operator watching the first ``signoff serve``.
warnings.filterwarnings(
    "ignore",
    message="Skipped unsupported reflection of expression-based index",
    category=exc.SAWarning,
)

# Any number from our namespace; concurrent `db upgrade` runs on PostgreSQL queue on it.
MIGRATION_LOCK_ID = 0x5160FF
# How long a SQLite migration waits for another process's to finish (``_run_sqlite``).
SQLITE_MIGRATION_WAIT_MS = 300_000


def _configure(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
        include_object=described_by_models(connection.dialect.name),
    )


def _run(connection: Connection) -> None:
    if connection.dialect.name == "sqlite":
        _run_sqlite(connection)
        return
    _configure(connection)
    with context.begin_transaction():
        connection.execute(text("SELECT pg_advisory_xact_lock(:id)"), {"id": MIGRATION_LOCK_ID})
        context.run_migrations()


def _run_sqlite(connection: Connection) -> None:
    """Every pending migration in one SQLite transaction that holds the write lock from
    before the current revision is read. Why: Python's sqlite3 opens no transaction for
    DDL, so alembic's own transactions left each CREATE and DROP committed at once. Two
    processes that started together (``serve`` and ``worker``: every command migrates
    SQLite itself) both read the old revision and ran the same migration over each other:
    0006 then left an empty search index, and all but one process failed to start. Now
    the second waits for the first, then finds the file at head; and a migration killed
    part-way leaves nothing behind."""
    connection.exec_driver_sql(f"PRAGMA busy_timeout = {SQLITE_MIGRATION_WAIT_MS}")
    connection.exec_driver_sql("BEGIN IMMEDIATE")
    # Configured inside that transaction, alembic opens none of its own.
    _configure(connection)
    context.run_migrations()
    connection.commit()


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
