"""With the measurement switch ``SIGNOFF_STOCK_EXECUTION`` set when the database is made,
every statement goes through SQLAlchemy, also those of the writers that share one SQLite
transaction (``group_commit``), whose session is emptied between writers."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from signoff.context import AppContext
from signoff.storage.prepared import session_io, statements
from tests.conftest import create_approval, create_org

pytestmark = pytest.mark.anyio


@pytest.fixture
def settings_overrides(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The switch is set before the database is made."""
    monkeypatch.setenv(statements.STOCK_EXECUTION_SWITCH, "1")
    return {}


async def test_with_the_switch_every_writer_of_a_shared_transaction_goes_through_sqlalchemy(
    client: httpx.AsyncClient, ctx: AppContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    org = await create_org(ctx, "Switched", members=1)
    prepared: list[object] = []
    sqlite_transaction_of = session_io.sqlite_transaction_of

    async def noted(session: object) -> object:
        prepared.append(session)
        return await sqlite_transaction_of(session)  # type: ignore[arg-type]

    monkeypatch.setattr(session_io, "sqlite_transaction_of", noted)
    await asyncio.gather(
        *(create_approval(client, org.admin, title=f"Deploy {n}") for n in range(8))
    )
    assert prepared == []
    if ctx.db.group_commit is not None:  # SQLite: some writers shared a transaction
        assert ctx.db.group_commit.committed_transactions < ctx.db.group_commit.committed_writers
