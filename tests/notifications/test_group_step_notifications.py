"""A group step that opens tells every active member of its group (issue 36), not those
outside it; a sequential chain tells the next group only once the step before it is
approved; an away member's delegate is told as well. On SQLite and PostgreSQL."""

from __future__ import annotations

import httpx
import pytest

from signoff.context import AppContext
from signoff.wiring import Wiring
from tests.conftest import Org, create_org
from tests.notifications.support import MailBox
from tests.notifications.test_flow import put_routing
from tests.people.test_delegation import away
from tests.steps.test_group_steps import finance_and_security, two_of_finance_and_security
from tests.steps.test_steps import vote

pytestmark = pytest.mark.anyio


async def test_an_opened_group_step_reaches_every_active_member(
    api: httpx.AsyncClient, ctx: AppContext, wiring: Wiring, mailbox: MailBox
) -> None:
    org = await create_org(ctx, "Initech", members=5)
    finance, security = org.members[:3], org.members[3:4]
    groups = await finance_and_security(api, org)
    await put_routing(
        api, org, {"channels": {"mail": {"type": "email"}}, "rules": [{"channels": ["mail"]}]}
    )
    request_id, fin_step, _ = await two_of_finance_and_security(
        api, org, groups, is_sequential=True
    )
    await wiring.notifications.run_once()
    assert await step_opened_to(api, org, request_id) == {m.email for m in finance}

    # The first approval does not open the next step; the second does.
    mailbox.mails.clear()
    assert (await vote(api, finance[0], request_id, fin_step["id"])).status_code == 200
    await wiring.notifications.run_once()
    assert mailbox.mails == []
    assert (await vote(api, finance[1], request_id, fin_step["id"])).status_code == 200
    await wiring.notifications.run_once()
    told = {address for mail in mailbox.mails for address in mail.recipients}
    assert told == {security[0].email}
    opened = {m.email for m in finance} | {security[0].email}
    assert await step_opened_to(api, org, request_id) == opened


async def step_opened_to(api: httpx.AsyncClient, org: Org, request_id: str) -> set[str]:
    """Whom the request's log says its opened steps were told (mail, here)."""
    log = await api.get(f"/api/v1/approvals/{request_id}/notifications", headers=org.admin.headers)
    assert log.status_code == 200, log.text
    return {row["recipient"] for row in log.json()["data"] if row["kind"] == "step_opened"}


async def test_an_away_members_delegate_is_told_too(
    api: httpx.AsyncClient, ctx: AppContext, wiring: Wiring, mailbox: MailBox
) -> None:
    org = await create_org(ctx, "Initech", members=5)
    finance, bob = org.members[:3], org.members[4]
    groups = await finance_and_security(api, org)
    await put_routing(
        api, org, {"channels": {"mail": {"type": "email"}}, "rules": [{"channels": ["mail"]}]}
    )
    # The first of finance is away; Bob, in no group, stands in.
    assert (await away(api, finance[0], bob)).status_code == 200
    request_id, _, _ = await two_of_finance_and_security(api, org, groups, is_sequential=True)
    await wiring.notifications.run_once()
    assert await step_opened_to(api, org, request_id) == {m.email for m in finance} | {bob.email}
