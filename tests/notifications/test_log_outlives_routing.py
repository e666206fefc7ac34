"""The notification log is a record: renaming, removing or retyping a channel in routing
neither deletes nor changes what the log says was sent through it, in the API and on the
request's page. What the channel had still to send is cancelled, not deleted, nor sent."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from bench.receiver import Receiver

from signoff.context import AppContext
from signoff.wiring import Wiring
from tests.conftest import Org, create_approval
from tests.dashboard.support import signed_in
from tests.notifications.support import MailBox
from tests.notifications.test_request_page import notifications_section
from tests.notifications.test_schedule import Clock

pytestmark = pytest.mark.anyio


def document(channels: dict[str, Any], names: list[str], org: Org) -> dict[str, Any]:
    return {
        "channels": channels,
        "rules": [
            {
                "channels": names,
                "audience": {"users": [org.members[1].email]},
                "reminders": {"after_minutes": 30, "times": 1},
            }
        ],
    }


async def put(api: httpx.AsyncClient, org: Org, body: dict[str, Any]) -> None:
    response = await api.put("/api/v1/routing", json=body, headers=org.admin.headers)
    assert response.status_code == 200, response.text


async def log_of(api: httpx.AsyncClient, org: Org, request_id: str) -> list[tuple[Any, ...]]:
    response = await api.get(
        f"/api/v1/approvals/{request_id}/notifications", headers=org.admin.headers
    )
    assert response.status_code == 200, response.text
    return sorted(
        (r["kind"], r["channel"], r["channel_type"], r["recipient"], r["status"], r["error"])
        for r in response.json()["data"]
    )


async def test_sent_rows_survive_a_rename_and_a_removal_and_pending_ones_are_cancelled(
    api: httpx.AsyncClient, ctx: AppContext, wiring: Wiring, org: Org, mailbox: MailBox
) -> None:
    clock = Clock()
    wiring.notifications.clock = clock
    person = org.members[1]
    async with Receiver() as slack:
        channels = {"mail": {"type": "email"}, "ops": {"type": "slack", "webhook_url": slack.url}}
        await put(api, org, document(channels, ["mail", "ops"], org))
        created = await create_approval(api, org.member)
        assert await wiring.notifications.run_once() == 2
        assert len(mailbox.mails) == 1 and len(slack.received) == 1

        # "mail" renamed "people", "ops" removed.
        await put(api, org, document({"people": {"type": "email"}}, ["people"], org))
        removed = "channel removed from routing"
        expected = [
            ("created", "mail", "email", person.email, "sent", None),
            ("created", "ops", "slack", "ops", "sent", None),
            ("reminder", "mail", "email", person.email, "cancelled", removed),
            ("reminder", "ops", "slack", "ops", "cancelled", removed),
        ]
        assert await log_of(api, org, created["id"]) == expected

        # The reminders' time comes: nothing goes out through the channels that left.
        clock.advance(31)
        assert await wiring.notifications.run_once() == 0
        assert len(mailbox.mails) == 1 and len(slack.received) == 1

        # A new channel under an old name does not take over the old rows.
        again = {"people": {"type": "email"}, "ops": {"type": "teams", "webhook_url": slack.url}}
        await put(api, org, document(again, ["people"], org))
        assert await log_of(api, org, created["id"]) == expected

    await signed_in(ctx, api, org.admin)
    shown = notifications_section((await api.get(f"/requests/{created['id']}")).text)
    assert shown.startswith("Notifications 4 ")
    assert f"Sent Approval requested to {person.name} {person.email} by e-mail (mail)" in shown
    assert "Sent Approval requested to ops by Slack" in shown
    assert shown.count(f"Last error: {removed}") == 2


async def test_a_channel_that_changes_type_keeps_its_log_and_sends_no_old_plan(
    api: httpx.AsyncClient, ctx: AppContext, wiring: Wiring, org: Org, mailbox: MailBox
) -> None:
    clock = Clock()
    wiring.notifications.clock = clock
    async with Receiver() as teams:
        await put(api, org, document({"ops": {"type": "email"}}, ["ops"], org))
        created = await create_approval(api, org.member)
        assert await wiring.notifications.run_once() == 1
        retyped = {"ops": {"type": "teams", "webhook_url": teams.url}}
        await put(api, org, document(retyped, ["ops"], org))
        clock.advance(31)
        assert await wiring.notifications.run_once() == 0
        assert teams.received == []
    email = org.members[1].email
    assert await log_of(api, org, created["id"]) == [
        ("created", "ops", "email", email, "sent", None),
        ("reminder", "ops", "email", email, "cancelled", "channel changed type in routing"),
    ]
