"""Requests people can tell apart on the dashboard: each shown by its number in the org
(``#2``) in the inbox, the history, its page and its breadcrumb, the CSV and the audit
log; found by it in the searches; its activity in words, not event names."""

from __future__ import annotations

import csv
import html
import io
import re
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from signoff.context import AppContext
from signoff.dashboard.activity import describe_event
from signoff.wiring import Wiring
from signoff.worker.sweeper import sweep_expired_once
from tests.conftest import Org, create_approval
from tests.dashboard.support import browser_client, signed_in
from tests.helpers import NO_SWEEP, backdate_expiry


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    return NO_SWEEP


def _titles(page: str) -> list[str]:
    """The request links of a list page, as read: "#2 Rotate keys"."""
    links = re.findall(r'<td class="cell-title">(.*?)</td>', page, re.S)
    return [" ".join(html.unescape(re.sub(r"<[^>]+>", "", link)).split()) for link in links]


def _activity(page: str) -> list[tuple[str, str]]:
    """The activity list: (event type, the words shown)."""
    found = re.findall(
        r'<li data-event="([a-z_.]+)"><span class="timeline-text">([^<]*)</span>', page
    )
    return [(kind, html.unescape(words)) for kind, words in found]


async def test_lists_and_the_csv_show_numbers_and_searches_find_them(
    ctx: AppContext, client: httpx.AsyncClient, org: Org
) -> None:
    first = await create_approval(client, org.admin, title="Rotate keys")
    await create_approval(client, org.admin, title="Deploy 2 regions", priority="low")
    third = await create_approval(client, org.admin, title="Refund order 77")
    await client.patch(
        f"/api/v1/approvals/{first['id']}", json={"decision": "approve"}, headers=org.admin.headers
    )
    await client.patch(
        f"/api/v1/approvals/{third['id']}", json={"decision": "reject"}, headers=org.admin.headers
    )
    await signed_in(ctx, client, org.member)

    assert _titles((await client.get("/")).text) == ["#2 Deploy 2 regions"]
    assert _titles((await client.get("/history")).text) == ["#3 Refund order 77", "#1 Rotate keys"]
    exported = await client.get("/history.csv")
    rows = list(csv.DictReader(io.StringIO(exported.text)))
    assert [(r["number"], r["title"]) for r in rows] == [
        ("3", "Refund order 77"),
        ("1", "Rotate keys"),
    ]

    # "#2" is that request alone; "2" is request #2 first, then the text's matches.
    inbox = (await client.get("/", params={"search": "#2"})).text
    assert _titles(inbox) == ["#2 Deploy 2 regions"]
    assert _titles((await client.get("/", params={"search": "#3"})).text) == []  # decided
    history = (await client.get("/history", params={"search": "#1"})).text
    assert _titles(history) == ["#1 Rotate keys"]
    assert _titles((await client.get("/history", params={"search": "3"})).text) == [
        "#3 Refund order 77"
    ]
    assert _titles((await client.get("/history", params={"search": "77"})).text) == [
        "#3 Refund order 77"
    ]


async def test_the_request_page_names_it_by_number_and_tells_its_activity_in_words(
    ctx: AppContext, client: httpx.AsyncClient, org: Org
) -> None:
    await create_approval(client, org.admin, title="Earlier")
    request = await create_approval(client, org.admin, title="Open the vault", required_approvals=2)
    url = f"/api/v1/approvals/{request['id']}"
    await client.post(f"{url}/comments", json={"body": "Why?"}, headers=org.member.headers)
    await client.patch(url, json={"decision": "approve"}, headers=org.member.headers)
    await client.patch(url, json={"decision": "approve"}, headers=org.members[1].headers)
    await signed_in(ctx, client, org.member)

    page = (await client.get(f"/requests/{request['id']}")).text
    assert re.search(r"<title>[^<]*#2 Open the vault · signoff</title>", page)
    assert re.search(r'aria-label="Breadcrumb">.*Request #2</span></nav>', page)
    assert request["id"][:8] not in page.split("</nav>")[0]  # no more id prefix
    assert '<span class="request-number">#2</span></h1>' in page
    assert _activity(page) == [
        ("request.created", "Requested by conn-0"),
        ("comment.created", "Comment by Member 1"),
        ("request.vote_recorded", "Approved by Member 1 (1 of 2)"),
        ("request.approved", "Approved by Member 2 (2 of 2)"),
    ]
    assert ">request.created<" not in page and "request.vote_recorded</" not in page


async def test_an_expired_and_a_cancelled_request_say_so(
    ctx: AppContext, wiring: Wiring, client: httpx.AsyncClient, org: Org
) -> None:
    deadline = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    expiring = await create_approval(client, org.admin, expires_at=deadline)
    cancelled = await create_approval(client, org.member)
    await backdate_expiry(ctx, expiring["id"])
    assert await sweep_expired_once(ctx, wiring.poisoned) == 1
    deleted = await client.delete(
        f"/api/v1/approvals/{cancelled['id']}", headers=org.member.headers
    )
    assert deleted.status_code == 200
    await signed_in(ctx, client, org.admin)

    expired_page = (await client.get(f"/requests/{expiring['id']}")).text
    assert _activity(expired_page)[-1] == (
        "request.expired",
        "Expired: nobody decided before the deadline",
    )
    cancelled_page = (await client.get(f"/requests/{cancelled['id']}")).text
    assert _activity(cancelled_page)[-1] == ("request.cancelled", "Cancelled by Member 1")


async def test_the_audit_log_shows_each_requests_number_and_title(
    ctx: AppContext, app: Any, client: httpx.AsyncClient, org: Org
) -> None:
    first = await create_approval(client, org.member, title="Rotate <keys>")
    second = await create_approval(client, org.member, title="Deploy billing")
    async with browser_client(app) as admin:
        await signed_in(ctx, admin, org.admin)
        page = (await admin.get("/admin/audit")).text
        rows = page.split("<tbody>")[1]
        number = '<span class="request-number">#{}</span>'
        assert f'href="/requests/{first["id"]}">{number.format(1)} Rotate &lt;keys&gt;' in rows
        assert f'href="/requests/{second["id"]}">{number.format(2)} Deploy billing' in rows
        # The first digits of a UUIDv7 (its time, shared by both) are no longer shown.
        assert first["id"][:8] not in rows.replace(first["id"], "").replace(second["id"], "")

        by_number = (await admin.get("/admin/audit", params={"request_id": "#2"})).text
        assert "Deploy billing" in by_number and "Rotate &lt;keys&gt;" not in by_number
        by_id = (await admin.get("/admin/audit", params={"request_id": first["id"]})).text
        assert "Rotate &lt;keys&gt;" in by_id.split("<tbody>")[1]
        assert "Deploy billing" not in by_id.split("<tbody>")[1]


class _Event:
    def __init__(self, type: str, actor: uuid.UUID | None = None, **data: Any) -> None:
        self.type, self.actor_id, self.data = type, actor, data


class _Step:
    def __init__(self, order: int) -> None:
        self.id, self.step_order = uuid.uuid4(), order


def test_every_event_type_reads_as_words() -> None:
    ann, gone = uuid.uuid4(), uuid.uuid4()
    names = {ann: "Ann"}
    step = _Step(2)

    def said(event: _Event) -> str:
        return describe_event(event, names, "deploy-bot", [_Step(1), step])

    assert said(_Event("request.created", ann)) == "Requested by deploy-bot"
    assert said(_Event("comment.created", gone)) == "Comment by a former user"
    assert (
        said(_Event("request.rejected", ann, via="email")) == "Rejected by Ann via an e-mail link"
    )
    assert said(_Event("request.approved", ann, required_approvals=1)) == "Approved by Ann"
    overridden = _Event("request.approved", ann, override=True, required_approvals=2)
    assert said(overridden) == "Approved by Ann, overriding the chain"
    assert said(_Event("step.approved", ann, step_id=str(step.id))) == "Step 2 approved by Ann"
    assert said(_Event("step.rejected", ann, via="slack")) == "A step rejected by Ann via Slack"
    assert said(_Event("steps.configured", ann, steps=[1, 2, 3])) == (
        "Approval chain of 3 steps set by Ann"
    )
    assert said(_Event("request.cancelled", ann)) == "Cancelled by Ann"
    assert said(_Event("request.expired")) == "Expired: nobody decided before the deadline"
    assert said(_Event("callback.delivered", attempt=2)) == "Callback delivered (attempt 2)"
    assert said(_Event("callback.failed", status_code=500)) == "Callback failed (HTTP 500)"
    assert said(_Event("callback.failed", error="timed out")) == "Callback failed (timed out)"
    assert said(_Event("something.new_here")) == "Something new here"
