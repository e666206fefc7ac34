"""``ApprovalRepository.open_step_voters`` (who an edit asks again): a sequential chain's
first pending step, a group step's members who have not voted, read in one pass over
the pending steps. Both databases."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest
from sqlalchemy import event

from signoff.context import AppContext
from tests.conftest import Org, create_approval, create_org
from tests.steps.test_group_steps import make_group, set_steps

pytestmark = pytest.mark.anyio


@pytest.fixture
async def big_org(ctx: AppContext) -> Org:
    return await create_org(ctx, "Initech", members=4)


async def test_open_voters_read_the_pending_steps_once(
    client: httpx.AsyncClient, ctx: AppContext, big_org: Org
) -> None:
    finance = big_org.members[:3]
    group_id = await make_group(client, big_org, "Finance", finance)
    request = await create_approval(
        client, big_org.admin, title="Pay the invoice", is_sequential=True
    )
    steps = [
        {"group_id": group_id, "step_order": 1, "required_approvals": 2},
        {"approver_id": big_org.members[3].user_id, "step_order": 2},
    ]
    made = await set_steps(client, big_org.admin, request["id"], steps)
    assert made.status_code == 201, made.text

    read: list[str] = []

    def seen(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if "FROM approval_steps" in statement:
            read.append(statement)

    engine = ctx.db.write_engine.sync_engine
    event.listen(engine, "before_cursor_execute", seen)
    try:
        async with ctx.transaction() as uow:
            voters = await uow.approvals.open_step_voters({uuid.UUID(request["id"])})
    finally:
        event.remove(engine, "before_cursor_execute", seen)
    # The sequential chain's open step is the group's: its three members, not the second
    # step's approver.
    assert voters == {uuid.UUID(request["id"]): frozenset(uuid.UUID(m.user_id) for m in finance)}
    assert len(read) == 1
