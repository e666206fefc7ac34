"""Programmatic access to the migration chain (``signoff db upgrade``, ``serve``)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import create_async_engine

MIGRATIONS_DIR = Path(__file__).parent


def alembic_config(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def upgrade_to_head(url: str) -> None:
    """Apply every pending migration. Blocking: call it outside the event loop."""
    command.upgrade(alembic_config(url), "heads")


def head_revisions() -> frozenset[str]:
    return frozenset(ScriptDirectory.from_config(alembic_config("")).get_heads())


def _current_revisions(connection: Connection) -> frozenset[str]:
    return frozenset(MigrationContext.configure(connection).get_current_heads())


async def current_revisions(url: str) -> frozenset[str]:
    engine = create_async_engine(url)
    try:
        async with engine.connect() as connection:
            return await connection.run_sync(_current_revisions)
    finally:
        await engine.dispose()


def is_at_head(url: str) -> bool:
    return asyncio.run(current_revisions(url)) == head_revisions()
