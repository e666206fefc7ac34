"""The measurement switch of prepared execution is read when the database is made, not
at each statement (storage/prepared/session_io.py)."""

from __future__ import annotations

import httpx
import pytest

from signoff.context import AppContext
from signoff.storage.prepared import session_io, statements
from tests.conftest import create_approval, create_org

pytestmark = pytest.mark.anyio


async def test_statements_do_not_read_the_environment(
    client: httpx.AsyncClient, ctx: AppContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The execution switch is read when the database is made, not at each statement."""
    org = await create_org(ctx, "Quiet", members=1)
    looked_up: list[str] = []
    switched = statements.switched

    def counted(name: str) -> bool:
        looked_up.append(name)
        return switched(name)

    monkeypatch.setattr(statements, "switched", counted)
    monkeypatch.setattr(session_io, "switched", counted, raising=False)
    created = await create_approval(client, org.admin)
    decided = await client.patch(
        f"/api/v1/approvals/{created['id']}",
        headers=org.members[0].headers,
        json={"decision": "approve"},
    )
    assert decided.status_code == 200, decided.text
    # (The planner's switch is read once per statement, when it is first compiled.)
    assert statements.STOCK_EXECUTION_SWITCH not in looked_up
