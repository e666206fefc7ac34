"""Those whose votes an edit of the arguments dismissed are asked again by the routing
rules (issue 35, "Approve with edits"), on SQLite and PostgreSQL: a count-based request's
earlier approvers, a group chain's voters (those of a sequential chain's open step now),
and nobody who has voted again by the time it is planned."""

from __future__ import annotations

import httpx
import pytest

from signoff.context import AppContext
from signoff.wiring import Wiring
from tests.conftest import Member, Org, create_approval, create_org
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


async def edited_after_two(
    api: httpx.AsyncClient, ctx: AppContext, wiring: Wiring, required: int
) -> tuple[Org, str]:
    """A count-based request of ``required`` approvals, notified as created, approved by
    its org's members 1 and 2, then edited by member 3: the org and the request's id."""
    org = await create_org(ctx, "Initech", members=4)
    await put_routing(api, org, MAIL)
    created = await create_approval(
        api, org.admin, arguments=ARGS, arguments_schema=SCHEMA, required_approvals=required
    )
    await wiring.notifications.run_once()
    await decide(api, org.members[1], created["id"])
    await decide(api, org.members[2], created["id"])
    await decide(api, org.members[3], created["id"], arguments=EDITED)
    return org, created["id"]


async def test_a_count_based_edit_asks_the_dismissed_approvers_again(
    api: httpx.AsyncClient, ctx: AppContext, wiring: Wiring, mailbox: MailBox
) -> None:
    org, request_id = await edited_after_two(api, ctx, wiring, required=3)
    first, second = org.members[1], org.members[2]
    # Their approvals were of the old arguments: both are asked again, the editor not.
    assert await told_after(wiring, mailbox) == {first.email, second.email}
    log = await api.get(f"/api/v1/approvals/{request_id}/notifications", headers=org.admin.headers)
    asked = {r["recipient"] for r in log.json()["data"] if r["kind"] == "step_opened"}
    assert asked == {first.email, second.email}


async def test_who_voted_again_before_planning_is_not_asked(
    api: httpx.AsyncClient, ctx: AppContext, wiring: Wiring, mailbox: MailBox
) -> None:
    org, request_id = await edited_after_two(api, ctx, wiring, required=4)
    await decide(api, org.members[1], request_id)  # before the workers planned the asking
    assert await told_after(wiring, mailbox) == {org.members[2].email}


async def groups_org(api: httpx.AsyncClient, ctx: AppContext) -> tuple[Org, tuple[str, str]]:
    """An org that mails every member, with Finance (members 0 to 2) and Security
    (member 3): the org and the groups' ids."""
    org = await create_org(ctx, "Initech", members=6)
    groups = await finance_and_security(api, org)
    await put_routing(api, org, MAIL)
    return org, groups


async def test_a_group_chain_edit_asks_its_dismissed_voters_again(
    api: httpx.AsyncClient, ctx: AppContext, wiring: Wiring, mailbox: MailBox
) -> None:
    org, groups = await groups_org(api, ctx)
    finance, security = org.members[:3], org.members[3]
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
    org, groups = await groups_org(api, ctx)
    finance, security = org.members[:3], org.members[3]
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
    org, groups = await groups_org(api, ctx)
    finance, security = org.members[:3], org.members[3]
    request_id, fin, _ = await group_chain(api, org, groups, quorum=1, is_sequential=True)
    await wiring.notifications.run_once()
    edited = await vote(api, finance[0], request_id, fin["id"], arguments=EDITED)
    assert edited.status_code == 200, edited.text
    assert await told_after(wiring, mailbox) == {security.email}
