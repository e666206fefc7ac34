"""The measurement switch of prepared execution (``SIGNOFF_STOCK_EXECUTION``) is read when
the database is made, not at each statement (storage/prepared/session_io.py); with it set,
every statement still goes through SQLAlchemy, also those of the writers that share one
SQLite transaction (``group_commit``), whose session is emptied between writers."""

from __future__ import annotations

import asyncio
from types import ModuleType
from typing import Any

import httpx
import pytest

from signoff.context import AppContext
from signoff.storage.prepared import session_io, statements
from tests.conftest import create_approval, create_org

pytestmark = pytest.mark.anyio


@pytest.fixture
def switch_on() -> bool:
    return False


@pytest.fixture
def settings_overrides(switch_on: bool, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The switch is set, when a test asks for it, before the database is made."""
    if switch_on:
        monkeypatch.setenv(statements.STOCK_EXECUTION_SWITCH, "1")
    return {}


def _calls_of(monkeypatch: pytest.MonkeyPatch, module: ModuleType, name: str) -> list[Any]:
    """The first argument of each call of ``module.name`` from now on."""
    calls: list[Any] = []
    original = getattr(module, name, None)

    def noted(first: Any) -> Any:
        calls.append(first)
        return original(first) if original is not None else None

    monkeypatch.setattr(module, name, noted, raising=False)
    return calls


async def test_statements_do_not_read_the_environment(
    client: httpx.AsyncClient, ctx: AppContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    org = await create_org(ctx, "Quiet", members=1)
    looked_up = _calls_of(monkeypatch, statements, "switched")
    session_io_looked_up = _calls_of(monkeypatch, session_io, "switched")
    created = await create_approval(client, org.admin)
    decided = await client.patch(
        f"/api/v1/approvals/{created['id']}",
        headers=org.members[0].headers,
        json={"decision": "approve"},
    )
    assert decided.status_code == 200, decided.text
    # (The planner's switch is read once per statement, when it is first compiled.)
    assert statements.STOCK_EXECUTION_SWITCH not in looked_up + session_io_looked_up


@pytest.mark.parametrize("switch_on", [True])
async def test_with_the_switch_every_writer_of_a_shared_transaction_goes_through_sqlalchemy(
    client: httpx.AsyncClient, ctx: AppContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    org = await create_org(ctx, "Switched", members=1)
    prepared = _calls_of(monkeypatch, session_io, "sqlite_transaction_of")
    await asyncio.gather(
        *(create_approval(client, org.admin, title=f"Deploy {n}") for n in range(8))
    )
    assert prepared == []
    if ctx.db.group_commit is not None:  # SQLite: some writers shared a transaction
        assert ctx.db.group_commit.committed_transactions < ctx.db.group_commit.committed_writers
