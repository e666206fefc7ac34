"""A group step that opens tells every active member of its group (issue 36), not those
outside it; a sequential chain tells the next group only once the step before it is
approved. On SQLite and PostgreSQL."""

from __future__ import annotations

import httpx
import pytest

from signoff.context import AppContext
from signoff.wiring import Wiring
from tests.conftest import create_approval, create_org
from tests.notifications.support import MailBox
from tests.notifications.test_flow import put_routing
from tests.steps.test_group_steps import make_group, set_steps
from tests.steps.test_steps import vote

pytestmark = pytest.mark.anyio


async def test_an_opened_group_step_reaches_every_active_member(
    api: httpx.AsyncClient, ctx: AppContext, wiring: Wiring, mailbox: MailBox
) -> None:
    org = await create_org(ctx, "Initech", members=5)
    finance, security = org.members[:3], org.members[3:4]
    outsider = org.members[4]
    finance_id = await make_group(api, org, "Finance", finance)
    security_id = await make_group(api, org, "Security", security)
    await put_routing(
        api, org, {"channels": {"mail": {"type": "email"}}, "rules": [{"channels": ["mail"]}]}
    )
    request = await create_approval(api, outsider, is_sequential=True)
    await wiring.notifications.run_once()
    mailbox.mails.clear()

    made = await set_steps(
        api,
        org.admin,
        request["id"],
        [
            {"group_id": finance_id, "required_approvals": 2, "step_order": 1},
            {"group_id": security_id, "step_order": 2},
        ],
    )
    assert made.status_code == 201, made.text
    await wiring.notifications.run_once()
    told = {address for mail in mailbox.mails for address in mail.recipients}
    assert told == {m.email for m in finance}

    # The first approval does not open the next step; the second does.
    fin_step, _ = made.json()["data"]
    mailbox.mails.clear()
    assert (await vote(api, finance[0], request["id"], fin_step["id"])).status_code == 200
    await wiring.notifications.run_once()
    assert mailbox.mails == []
    assert (await vote(api, finance[1], request["id"], fin_step["id"])).status_code == 200
    await wiring.notifications.run_once()
    told = {address for mail in mailbox.mails for address in mail.recipients}
    assert told == {security[0].email}
