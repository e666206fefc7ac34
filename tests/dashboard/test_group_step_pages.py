"""Group steps on the dashboard (issue 36), on SQLite and PostgreSQL: the inbox lists an
open group step to its members only, the request page shows the group and its count,
and a member votes from it."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from signoff.context import AppContext
from tests.conftest import create_org
from tests.dashboard.support import post_form, signed_in
from tests.dashboard.test_inbox import titles_waiting_for
from tests.helpers import NO_SWEEP
from tests.steps.test_group_steps import make_group, one_group_step

pytestmark = pytest.mark.anyio


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    return NO_SWEEP


async def test_a_member_sees_and_votes_a_group_step(
    ctx: AppContext, client: httpx.AsyncClient
) -> None:
    org = await create_org(ctx, "Initech", members=4)
    finance, outsider = org.members[:3], org.members[3]
    finance_id = await make_group(client, org, "Finance", finance)
    request_id, _ = await one_group_step(client, org, finance_id, required_approvals=2)
    assert await titles_waiting_for(ctx, org, finance[1]) == ["Pay the invoice"]
    assert await titles_waiting_for(ctx, org, outsider) == []

    await signed_in(ctx, client, finance[0])
    url = f"/requests/{request_id}"
    page = (await client.get(url)).text
    assert "2 of Finance" in page and "(0 of 2 approved)" in page
    assert "Your vote counts as one of them." in page
    voted = await post_form(client, url, f"{url}/decision", decision="approve")
    assert voted.status_code == 303, voted.text
    page = (await client.get(url)).text
    assert "(1 of 2 approved)" in page
    assert 'name="decision" value="approve"' not in page  # voted: no buttons again
    assert await titles_waiting_for(ctx, org, finance[0]) == []
    assert await titles_waiting_for(ctx, org, finance[1]) == ["Pay the invoice"]
    status = await client.get(f"/api/v1/approvals/{request_id}", headers=org.admin.headers)
    assert status.json()["status"] == "pending"
