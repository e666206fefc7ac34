"""Reminders, escalation and expiry warnings with an injected clock (no sleeping), steps
opening in a sequential chain, and what deciding does to what is scheduled."""

from __future__ import annotations

from datetime import datetime, timedelta

import httpx
import pytest

from signoff.common.time import utcnow
from signoff.context import AppContext
from signoff.wiring import Wiring
from tests.conftest import Org, create_approval
from tests.notifications.support import MailBox

pytestmark = pytest.mark.anyio


class Clock:
    """Real time, moved forward by the test: the API's own clock stays real."""

    def __init__(self) -> None:
        self.offset = timedelta()

    @property
    def now(self) -> datetime:
        return utcnow() + self.offset

    def __call__(self) -> datetime:
        return self.now

    def advance(self, minutes: float) -> None:
        self.offset += timedelta(minutes=minutes)


async def put(api: httpx.AsyncClient, org: Org, rule: dict[str, object]) -> None:
    document = {"channels": {"mail": {"type": "email"}}, "rules": [{"channels": ["mail"], **rule}]}
    response = await api.put("/api/v1/routing", json=document, headers=org.admin.headers)
    assert response.status_code == 200, response.text


async def round_of(wiring: Wiring, mailbox: MailBox) -> list[tuple[str, str]]:
    """One sender round; the (recipient, subject) of each mail it sent."""
    before = len(mailbox.mails)
    await wiring.notifications.run_once()
    return [(m.recipients[0], str(m.message["Subject"])) for m in mailbox.mails[before:]]


async def test_reminders_then_escalation_then_decision_cancels_the_rest(
    api: httpx.AsyncClient, ctx: AppContext, wiring: Wiring, org: Org, mailbox: MailBox
) -> None:
    clock = Clock()
    wiring.notifications.clock = clock
    await put(
        api,
        org,
        {
            "audience": {"users": ["member1@acme.example"]},
            "reminders": {"after_minutes": 30, "times": 2},
            "escalation": {"after_minutes": 90, "audience": "admins"},
            "expiry_warning": {"at_fraction": 0.8},
        },
    )
    expires = (clock.now + timedelta(minutes=200)).isoformat()
    created = await create_approval(api, org.member, expires_at=expires)

    sent = await round_of(wiring, mailbox)
    assert [(to, subject.split(":")[0]) for to, subject in sent] == [
        ("member1@acme.example", "[high] Approval requested")
    ]
    assert await round_of(wiring, mailbox) == []  # nothing else is due yet
    clock.advance(29)
    assert await round_of(wiring, mailbox) == []
    clock.advance(2)
    [(to, subject)] = await round_of(wiring, mailbox)
    assert to == "member1@acme.example" and "Reminder" in subject
    clock.advance(30)
    [(to, subject)] = await round_of(wiring, mailbox)
    assert "Reminder" in subject
    clock.advance(30)
    [(to, subject)] = await round_of(wiring, mailbox)
    assert to == "admin0@acme.example" and "Escalated" in subject
    assert await round_of(wiring, mailbox) == []

    decided = await api.patch(
        f"/api/v1/approvals/{created['id']}",
        json={"decision": "approve"},
        headers=org.admin.headers,
    )
    assert decided.status_code == 200
    clock.advance(100)  # past the expiry warning's time (160 min)
    assert await round_of(wiring, mailbox) == []
    log = await api.get(
        f"/api/v1/approvals/{created['id']}/notifications", headers=org.admin.headers
    )
    kinds = [(r["kind"], r["status"]) for r in log.json()["data"]]
    assert kinds == [
        ("created", "sent"),
        ("reminder", "sent"),
        ("reminder", "sent"),
        ("escalated", "sent"),
        ("expiry_warning", "cancelled"),
    ]


async def test_cancelling_cancels_pending_reminders(
    api: httpx.AsyncClient, ctx: AppContext, wiring: Wiring, org: Org, mailbox: MailBox
) -> None:
    clock = Clock()
    wiring.notifications.clock = clock
    await put(api, org, {"audience": "admins", "reminders": {"after_minutes": 5, "times": 3}})
    created = await create_approval(api, org.member)
    await round_of(wiring, mailbox)
    cancelled = await api.delete(f"/api/v1/approvals/{created['id']}", headers=org.member.headers)
    assert cancelled.status_code == 200
    clock.advance(60)
    assert await round_of(wiring, mailbox) == []
    log = await api.get(
        f"/api/v1/approvals/{created['id']}/notifications", headers=org.admin.headers
    )
    assert [r["status"] for r in log.json()["data"]] == [
        "sent",
        "cancelled",
        "cancelled",
        "cancelled",
    ]


async def test_a_sequential_chain_tells_each_approver_when_their_step_opens(
    api: httpx.AsyncClient, ctx: AppContext, wiring: Wiring, org: Org, mailbox: MailBox
) -> None:
    await put(api, org, {"match": {"has_steps": True}, "audience": "step_approvers"})
    created = await create_approval(api, org.member, is_sequential=True)
    assert await round_of(wiring, mailbox) == []  # no chain yet: the rule does not match
    first, second = org.members[1], org.members[2]
    steps = await api.post(
        f"/api/v1/approvals/{created['id']}/steps",
        json={
            "steps": [
                {"approver_id": first.user_id, "step_order": 1},
                {"approver_id": second.user_id, "step_order": 2},
            ]
        },
        headers=org.admin.headers,
    )
    assert steps.status_code == 201, steps.text
    [(to, subject)] = await round_of(wiring, mailbox)
    assert to == first.email and "Your approval is requested" in subject
    step_id = steps.json()["data"][0]["id"]
    vote = await api.patch(
        f"/api/v1/approvals/{created['id']}/steps/{step_id}",
        json={"decision": "approve"},
        headers=first.headers,
    )
    assert vote.status_code == 200, vote.text
    [(to, subject)] = await round_of(wiring, mailbox)
    assert to == second.email


async def test_a_request_cancelled_before_planning_notifies_nobody(
    api: httpx.AsyncClient, ctx: AppContext, wiring: Wiring, org: Org, mailbox: MailBox
) -> None:
    """The create only writes a plan; a cancel that comes before a worker plans it leaves
    no stale "approval requested" mail, and no reminders, behind."""
    from sqlalchemy import func, select

    from signoff.models import NotificationPlan

    clock = Clock()
    wiring.notifications.clock = clock
    await put(api, org, {"audience": "admins", "reminders": {"after_minutes": 5, "times": 2}})
    created = await create_approval(api, org.member)
    cancelled = await api.delete(f"/api/v1/approvals/{created['id']}", headers=org.member.headers)
    assert cancelled.status_code == 200
    assert await round_of(wiring, mailbox) == []
    clock.advance(60)
    assert await round_of(wiring, mailbox) == []
    log = await api.get(
        f"/api/v1/approvals/{created['id']}/notifications", headers=org.admin.headers
    )
    assert log.json() == {"data": []}
    async with ctx.reading() as uow:
        left = await uow.session.scalar(select(func.count()).select_from(NotificationPlan))
    assert left == 0  # planned (to nothing), not left waiting


async def test_a_step_decided_before_planning_is_not_announced_to_its_approver(
    api: httpx.AsyncClient, ctx: AppContext, wiring: Wiring, org: Org, mailbox: MailBox
) -> None:
    await put(api, org, {"match": {"has_steps": True}, "audience": "step_approvers"})
    created = await create_approval(api, org.member, is_sequential=True)
    first, second = org.members[1], org.members[2]
    steps = await api.post(
        f"/api/v1/approvals/{created['id']}/steps",
        json={
            "steps": [
                {"approver_id": first.user_id, "step_order": 1},
                {"approver_id": second.user_id, "step_order": 2},
            ]
        },
        headers=org.admin.headers,
    )
    assert steps.status_code == 201, steps.text
    vote = await api.patch(
        f"/api/v1/approvals/{created['id']}/steps/{steps.json()['data'][0]['id']}",
        json={"decision": "approve"},
        headers=first.headers,
    )
    assert vote.status_code == 200, vote.text
    # Both openings are planned in one round: only the step still open is announced.
    assert [to for to, _ in await round_of(wiring, mailbox)] == [second.email]


async def test_the_background_sender_mails_right_after_the_commit(
    ctx: AppContext, wiring: Wiring, org: Org, mailbox: MailBox
) -> None:
    """With the worker loop running, the create's commit wakes it: no poll interval."""
    from signoff.app import create_app

    application = create_app(ctx.settings, wiring=wiring, background=True)
    async with application.router.lifespan_context(application):
        transport = httpx.ASGITransport(app=application)
        async with httpx.AsyncClient(transport=transport, base_url="http://signoff.test") as api:
            await put(api, org, {"audience": "admins"})
            await create_approval(api, org.member)
            await mailbox.wait_for(1)
    assert mailbox.mails[0].recipients == ["admin0@acme.example"]


async def test_a_failed_send_is_retried_with_backoff_and_logged_per_attempt(
    api: httpx.AsyncClient, ctx: AppContext, wiring: Wiring, org: Org
) -> None:
    from bench.receiver import Receiver, Reply

    clock = Clock()
    wiring.notifications.clock = clock
    async with Receiver(replies=[Reply(500), Reply(503)], default=Reply(200)) as teams:
        document = {
            "channels": {"t": {"type": "teams", "webhook_url": teams.url}},
            "rules": [{"channels": ["t"]}],
        }
        assert (
            await api.put("/api/v1/routing", json=document, headers=org.admin.headers)
        ).status_code == 200
        created = await create_approval(api, org.member)
        url = f"/api/v1/approvals/{created['id']}/notifications"
        await wiring.notifications.run_once()
        [row] = (await api.get(url, headers=org.admin.headers)).json()["data"]
        assert (row["status"], row["attempts"], row["error"]) == ("pending", 1, "non-2xx status")
        await wiring.notifications.run_once()
        assert len(teams.received) == 1  # not due again yet
        clock.advance(5 / 60 + 0.01)  # the first retry comes after 5 s
        await wiring.notifications.run_once()
        clock.advance(30 / 60 + 0.01)  # the second after 30 s more
        await wiring.notifications.run_once()
        assert len(teams.received) == 3
    [row] = (await api.get(url, headers=org.admin.headers)).json()["data"]
    assert (row["status"], row["attempts"], row["error"]) == ("sent", 3, None)


async def test_a_burst_becomes_one_slack_digest_per_interval_and_nothing_is_lost(
    api: httpx.AsyncClient, ctx: AppContext, wiring: Wiring, org: Org
) -> None:
    import orjson
    from bench.receiver import Receiver

    from tests.notifications.support import check_slack_message

    clock = Clock()
    wiring.notifications.clock = clock
    async with Receiver() as slack:
        document = {
            "channels": {"s": {"type": "slack", "webhook_url": slack.url}},
            "rules": [{"channels": ["s"]}],
        }
        assert (
            await api.put("/api/v1/routing", json=document, headers=org.admin.headers)
        ).status_code == 200
        for number in range(30):
            await create_approval(api, org.member, title=f"Burst {number}")
        await wiring.notifications.run_once()
        [digest] = slack.received
        for number in range(30, 33):
            await create_approval(api, org.member, title=f"Burst {number}")
        await wiring.notifications.run_once()
        assert len(slack.received) == 1  # within the interval: they wait
        clock.advance(1.1 / 60)
        await wiring.notifications.run_once()
        [_, second] = slack.received
    first = orjson.loads(digest.body)
    check_slack_message(first)
    assert first["text"] == "30 requests wait for a decision"
    assert "…and 10 more in the inbox." in digest.body.decode()
    later = orjson.loads(second.body)
    check_slack_message(later)
    assert later["text"] == "3 requests wait for a decision"
    async with ctx.reading() as uow:
        from sqlalchemy import func, select

        from signoff.models import Notification

        counts = dict(
            (
                await uow.session.execute(
                    select(Notification.status, func.count()).group_by(Notification.status)
                )
            ).all()
        )
    assert counts == {"sent": 33}


async def test_an_org_whose_stored_rules_no_longer_validate_holds_up_no_other_org(
    api: httpx.AsyncClient, ctx: AppContext, wiring: Wiring, org: Org, mailbox: MailBox
) -> None:
    """Plans are taken in batches across orgs: one org's broken document (stored by an
    older version, say) skips that org, and the batch is planned for the others."""
    import uuid

    from sqlalchemy import func, select, update

    from signoff.models import NotificationPlan, RoutingConfig
    from tests.conftest import create_org

    other = await create_org(ctx, "Other", members=1)
    for who in (org, other):
        document = {
            "channels": {"mail": {"type": "email"}},
            "rules": [{"channels": ["mail"], "audience": "admins"}],
        }
        saved = await api.put("/api/v1/routing", json=document, headers=who.admin.headers)
        assert saved.status_code == 200, saved.text
    async with ctx.transaction() as uow:
        await uow.session.execute(
            update(RoutingConfig)
            .where(RoutingConfig.org_id == uuid.UUID(other.id))
            .values(document={"rules": [{"channels": ["mail"], "audience": "nobody"}]})
        )
    await create_approval(api, other.member)
    await create_approval(api, org.member)
    sent = await round_of(wiring, mailbox)
    assert [to for to, _ in sent] == ["admin0@acme.example"]
    async with ctx.reading() as uow:
        left = await uow.session.scalar(select(func.count()).select_from(NotificationPlan))
    assert left == 0


async def test_a_plan_that_cannot_be_planned_is_parked_and_holds_up_nothing(
    api: httpx.AsyncClient,
    ctx: AppContext,
    wiring: Wiring,
    org: Org,
    mailbox: MailBox,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One plan whose planning fails (a row no code of this version can plan) is rolled
    back alone and parked: the other plans of its batch are planned, what is due is sent,
    and the parked plan is planned once the fault is gone and its wait is over."""
    import time

    from signoff.notifications.planning import service

    await put(api, org, {"audience": "admins"})
    poisoned = await create_approval(api, org.member, title="Cannot be planned")
    await create_approval(api, org.member, title="Plans fine")
    plan_created = service._plan_created

    async def failing_for_one(*args: object, **kwargs: object) -> list[dict[str, object]]:
        request = args[3]
        if str(getattr(request, "id", "")) == poisoned["id"]:
            raise RuntimeError("a row this version cannot plan")
        return await plan_created(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(service, "_plan_created", failing_for_one)
    sent = await round_of(wiring, mailbox)
    assert len(sent) == 1 and "Plans fine" in sent[0][1]
    assert wiring.poisoned.counts[service.PLAN_JOB] == 1
    assert await round_of(wiring, mailbox) == []  # parked: not retried at once
    assert wiring.poisoned.counts[service.PLAN_JOB] == 1

    monkeypatch.setattr(service, "_plan_created", plan_created)
    waited = time.monotonic() + wiring.poisoned.retry_after_seconds + 1
    wiring.poisoned.clock = lambda: waited  # its wait is over
    sent = await round_of(wiring, mailbox)
    assert len(sent) == 1 and "Cannot be planned" in sent[0][1]


async def test_a_channels_interval_counts_from_the_end_of_its_last_send(
    api: httpx.AsyncClient, ctx: AppContext, wiring: Wiring, org: Org
) -> None:
    """A slow send does not eat into the channel's interval: the next message may start an
    interval after the previous one was accepted, not after it was claimed."""
    from bench.receiver import Receiver

    clock = Clock()
    sender = wiring.notifications
    sender.clock = clock
    post_json = sender.http.post_json

    async def slow_post(*args: object, **kwargs: object) -> object:
        clock.advance(0.6 / 60)  # the chat service takes 0.6 s to accept it
        return await post_json(*args, **kwargs)  # type: ignore[arg-type]

    sender.http.post_json = slow_post  # type: ignore[method-assign]
    async with Receiver() as slack:
        document = {
            "channels": {"s": {"type": "slack", "webhook_url": slack.url}},
            "rules": [{"channels": ["s"]}],
        }
        saved = await api.put("/api/v1/routing", json=document, headers=org.admin.headers)
        assert saved.status_code == 200
        await create_approval(api, org.member, title="First")
        await sender.run_once()
        assert len(slack.received) == 1
        await create_approval(api, org.member, title="Second")
        # 1.1 s after the first send was claimed, but only 0.5 s after it ended: wait.
        clock.advance(0.5 / 60)
        await sender.run_once()
        assert len(slack.received) == 1
        # An interval (1 s) after the end of the first send: the second goes out.
        clock.advance(0.5 / 60)
        await sender.run_once()
        assert len(slack.received) == 2
    assert b"Second" in slack.received[1].body
