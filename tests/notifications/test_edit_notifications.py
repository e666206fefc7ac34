"""Those whose votes an edit of the arguments dismissed are asked again by the routing
rules (issue 35, "Approve with edits"), on SQLite and PostgreSQL: a count-based request's
earlier approvers, a group chain's voters (those of a sequential chain's open step now),
and nobody who has voted again by the time it is planned."""

from __future__ import annotations

import httpx
import pytest

from signoff.context import AppContext
from signoff.wiring import Wiring
from tests.conftest import Member, create_approval, create_org
from tests.groups.test_group_edits import EDITED, group_chain
from tests.notifications.support import MailBox
from tests.notifications.test_flow import put_routing
from tests.receipts.test_receipts import ARGS, SCHEMA
from tests.steps.test_group_steps import finance_and_security
from tests.steps.test_steps import vote

pytestmark = pytest.mark.anyio

MAIL = {"channels": {"mail": {"type": "email"}}, "rules": [{"channels": ["mail"]}]}


async def decide(api: httpx.AsyncClient, who: Member, request_id: str, **body: object) -> None:
    answer = await api.patch(
        f"/api/v1/approvals/{request_id}",
        json={"decision": "approve", **body},
        headers=who.headers,
    )
    assert answer.status_code == 200, answer.text


async def told_after(wiring: Wiring, mailbox: MailBox) -> set[str]:
    """Whom the mail the workers send next goes to."""
    mailbox.mails.clear()
    await wiring.notifications.run_once()
    return {address for mail in mailbox.mails for address in mail.recipients}


async def test_a_count_based_edit_asks_the_dismissed_approvers_again(
    api: httpx.AsyncClient, ctx: AppContext, wiring: Wiring, mailbox: MailBox
) -> None:
    org = await create_org(ctx, "Initech", members=4)
    await put_routing(api, org, MAIL)
    created = await create_approval(
        api, org.admin, arguments=ARGS, arguments_schema=SCHEMA, required_approvals=3
    )
    await wiring.notifications.run_once()
    first, second, editor = org.members[1], org.members[2], org.members[3]
    await decide(api, first, created["id"])
    await decide(api, second, created["id"])
    assert await told_after(wiring, mailbox) == set()
    await decide(api, editor, created["id"], arguments=EDITED)
    # Their approvals were of the old arguments: both are asked again, the editor not.
    assert await told_after(wiring, mailbox) == {first.email, second.email}
    log = await api.get(
        f"/api/v1/approvals/{created['id']}/notifications", headers=org.admin.headers
    )
    asked = {r["recipient"] for r in log.json()["data"] if r["kind"] == "step_opened"}
    assert asked == {first.email, second.email}


async def test_who_voted_again_before_planning_is_not_asked(
    api: httpx.AsyncClient, ctx: AppContext, wiring: Wiring, mailbox: MailBox
) -> None:
    org = await create_org(ctx, "Initech", members=4)
    await put_routing(api, org, MAIL)
    created = await create_approval(
        api, org.admin, arguments=ARGS, arguments_schema=SCHEMA, required_approvals=4
    )
    await wiring.notifications.run_once()
    first, second, editor = org.members[1], org.members[2], org.members[3]
    await decide(api, first, created["id"])
    await decide(api, second, created["id"])
    await decide(api, editor, created["id"], arguments=EDITED)
    await decide(api, first, created["id"])  # before the workers planned the asking
    assert await told_after(wiring, mailbox) == {second.email}


async def test_a_group_chain_edit_asks_its_dismissed_voters_again(
    api: httpx.AsyncClient, ctx: AppContext, wiring: Wiring, mailbox: MailBox
) -> None:
    org = await create_org(ctx, "Initech", members=6)
    finance, security = org.members[:3], org.members[3]
    groups = await finance_and_security(api, org)
    await put_routing(api, org, MAIL)
    request_id, fin, sec = await group_chain(api, org, groups)
    await wiring.notifications.run_once()
    assert (await vote(api, finance[0], request_id, fin["id"])).status_code == 200
    assert (await vote(api, security, request_id, sec["id"])).status_code == 200
    edited = await vote(api, finance[1], request_id, fin["id"], arguments=EDITED)
    assert edited.status_code == 200, edited.text
    # finance[2] never voted (told when the step opened); the editor's vote stands.
    assert await told_after(wiring, mailbox) == {finance[0].email, security.email}


async def test_a_sequential_group_chain_asks_its_open_steps_voters_now(
    api: httpx.AsyncClient, ctx: AppContext, wiring: Wiring, mailbox: MailBox
) -> None:
    org = await create_org(ctx, "Initech", members=6)
    finance, security = org.members[:3], org.members[3]
    groups = await finance_and_security(api, org)
    await put_routing(api, org, MAIL)
    request_id, fin, sec = await group_chain(api, org, groups, is_sequential=True)
    for member in finance[:2]:
        assert (await vote(api, member, request_id, fin["id"])).status_code == 200
    await wiring.notifications.run_once()
    edited = await vote(api, security, request_id, sec["id"], arguments=EDITED)
    assert edited.status_code == 200, edited.text
    # The first step reopened: those who approved it are asked again.
    assert await told_after(wiring, mailbox) == {finance[0].email, finance[1].email}


async def test_an_edit_on_a_sequential_chains_first_step_opens_the_next(
    api: httpx.AsyncClient, ctx: AppContext, wiring: Wiring, mailbox: MailBox
) -> None:
    org = await create_org(ctx, "Initech", members=6)
    finance, security = org.members[:3], org.members[3]
    groups = await finance_and_security(api, org)
    await put_routing(api, org, MAIL)
    request_id, fin, _ = await group_chain(api, org, groups, quorum=1, is_sequential=True)
    await wiring.notifications.run_once()
    edited = await vote(api, finance[0], request_id, fin["id"], arguments=EDITED)
    assert edited.status_code == 200, edited.text
    assert await told_after(wiring, mailbox) == {security.email}
