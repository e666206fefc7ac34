"""Edit and approve in the dashboard on a chain with group steps, on SQLite and
PostgreSQL: a member edits through the form and its confirmation, and the page says the
edit counted as their vote, whose votes were dismissed (asked again), which steps
reopened, and, for a delegate, whom they stood in for."""

from __future__ import annotations

import html

import httpx
import pytest

from signoff.context import AppContext
from tests.conftest import Org
from tests.dashboard.support import post_form, signed_in
from tests.groups.test_group_edits import (
    EDITED,
    big_org,
    both_steps_voted,
    edited_event,
    group_chain,
    read,
    steps_of,
)
from tests.oauth.support import forms_of
from tests.people.test_delegation import away
from tests.steps.test_group_steps import finance_and_security
from tests.steps.test_steps import vote

pytestmark = pytest.mark.anyio


__all__ = ["big_org"]  # the fixture


def activity(page: str) -> list[str]:
    """The page's activity list, sentence by sentence."""
    marker = '<span class="timeline-text">'
    return [html.unescape(part.split("</span>", 1)[0]) for part in page.split(marker)[1:]]


async def test_edit_and_approve_on_a_group_step_says_what_it_dismissed(
    ctx: AppContext, client: httpx.AsyncClient, big_org: Org
) -> None:
    finance, security = big_org.members[:3], big_org.members[3]
    request_id, _, _ = await both_steps_voted(client, big_org)

    url = f"/requests/{request_id}"
    await signed_in(ctx, client, finance[1])
    page = (await client.get(url)).text
    assert f'href="{url}/edit">Edit and approve<' in page
    fields = {"arg:service": "billing", "arg:replicas": "5", "arg:regions": "eu"}
    review = await post_form(client, f"{url}/edit", f"{url}/edit", **fields)
    assert review.status_code == 200 and "Confirm your edit" in review.text
    assert (
        "counts as your approval on your step. The earlier votes of "
        f"{finance[0].name}, {security.name} were on the old arguments: they no longer "
        "count, and they are asked again."
    ) in html.unescape(review.text)
    confirm = next(f for f in forms_of(review.text) if f["action"] == f"{url}/decision")
    decided = await client.post(f"{url}/decision", data=confirm["fields"])
    assert decided.status_code == 303

    body = await read(client, big_org, request_id)
    assert body["arguments"] == EDITED and body["status"] == "pending"
    assert [s["status"] for s in await steps_of(client, big_org, request_id)] == [
        "pending",
        "pending",
    ]
    page = (await client.get(url)).text
    assert "You edited the arguments. Your vote is recorded." in page
    assert "Earlier approvals were of the old arguments: they are asked again." in page
    [said] = [line for line in activity(page) if line.startswith("Arguments edited")]
    assert said == (
        f"Arguments edited by {finance[1].name} (2 changes); the edit counts as their "
        f"approval on step 1. Votes dismissed, and asked again: {finance[0].name} (step 1), "
        f"{security.name} (step 2). Reopened: step 2"
    )
    assert f"Step 1 vote recorded by {finance[1].name}" in activity(page)
    # Under a chain, each vote names its step: the edit's vote is step 1's, not the request's.
    assert (
        f'<span class="muted">Step 1:</span> <span class="vote vote-approve">Approved</span> '
        f"by <strong>{finance[1].name}</strong>"
    ) in page
    event = await edited_event(client, big_org, request_id)
    assert event["data"]["counts_as_approval"] is True


async def test_a_delegates_edit_reads_bob_for_ann(
    ctx: AppContext, client: httpx.AsyncClient, big_org: Org
) -> None:
    finance, bob = big_org.members[:3], big_org.members[5]
    groups = await finance_and_security(client, big_org)
    request_id, fin, _ = await group_chain(client, big_org, groups)
    assert (await away(client, finance[0], bob)).status_code == 200
    edited = await vote(client, bob, request_id, fin["id"], arguments=EDITED)
    assert edited.status_code == 200, edited.text
    await signed_in(ctx, client, finance[1])
    page = (await client.get(f"/requests/{request_id}")).text
    [said] = [line for line in activity(page) if line.startswith("Arguments edited")]
    assert said.startswith(f"Arguments edited by {bob.name} for {finance[0].name} (2 changes)")
    assert "Votes dismissed" not in said
