"""Programmatic access to the migration chain (``signoff db upgrade``, ``serve``)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.schema import SchemaItem

MIGRATIONS_DIR = Path(__file__).parent
T = TypeVar("T")

# Dialect-specific objects the models do not describe, managed by hand in the migrations:
# full-text search (0001), the request counts (0005 on SQLite, 0018 on PostgreSQL) and
# the audit sealer's mark (0055, SQLite).
HAND_MANAGED_PREFIXES = (
    "approval_requests_fts",
    "search_vector",
    "ix_approval_requests_search",
    "approval_request_counts",
    "audit_seal_mark",
)


def described_by_models(dialect: str) -> Callable[..., bool]:
    """Alembic's ``include_object`` on ``dialect``: compare only what the models describe,
    leaving out a model object made on another dialect only (``models.base.only_on``: its
    ``info["dialect"]``; alembic does not read ``ddl_if``)."""

    def include(obj: object, name: str | None, type_: str, reflected: bool, *_: object) -> bool:
        info = obj.info if isinstance(obj, SchemaItem) else {}
        if not reflected and info.get("dialect", dialect) != dialect:
            return False
        return not (name or "").startswith(HAND_MANAGED_PREFIXES)

    return include


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


async def run_on(url: str, action: Callable[[Connection], T]) -> T:
    """``action`` with a (synchronous) connection to the database at ``url``."""
    engine = create_async_engine(url)
    try:
        async with engine.connect() as connection:
            return await connection.run_sync(action)
    finally:
        await engine.dispose()


async def current_revisions(url: str) -> frozenset[str]:
    return await run_on(url, _current_revisions)


def is_at_head(url: str) -> bool:
    return asyncio.run(current_revisions(url)) == head_revisions()
