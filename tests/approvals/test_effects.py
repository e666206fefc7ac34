"""Transition -> effects: what each status change causes, and that applying it writes
exactly that, against an in-memory unit of work (no database; milliseconds)."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from signoff.approvals import state
from signoff.approvals.effects import Author, apply_create, apply_transition, apply_transitions
from signoff.approvals.state import RequestView, StepSpec, StepView
from signoff.auth.actor import Actor
from signoff.errors import Forbidden, StepsLocked, ValidationFailed
from tests.approvals.fakes import NOW, FakeUnitOfWork, pending_request

ALICE = Author(uuid.uuid4(), "alice@acme.example", "Alice")
BOB = Author(uuid.uuid4(), "bob@acme.example", "Bob")
ADMIN = Author(uuid.uuid4(), "admin@acme.example", "Admin")


def actor(author: Author, *, admin: bool = False, connection: uuid.UUID | None = None) -> Actor:
    return Actor(author.user_id, is_admin=admin, connection_id=connection)


def kinds(transition: state.Transition) -> list[str]:
    return [type(effect).__name__ for effect in transition.effects]


async def test_an_approval_writes_the_row_vote_comment_events_callback_and_signal() -> None:
    row = pending_request(callback_url="https://hooks.example/approved")
    view = RequestView("pending", 1, connection_id=row.connection_id, has_callback=True)
    action = state.Decide(actor(ALICE), "approve", comment="ship it", source="slack")
    transition = state.apply(view, action, NOW)
    assert kinds(transition) == [
        "UpdateRequest",
        "RecordVote",
        "AddComment",
        "WriteEvent",
        "IssueReceipt",
        "SendCallback",
        "StopReminders",
        "PublishChange",
    ]

    uow = FakeUnitOfWork()
    await apply_transition(uow, row, transition, ALICE, NOW)
    stored = uow.approvals.rows[row.id]
    assert (stored["status"], stored["decided_by"], stored["decision_comment"]) == (
        "approved",
        ALICE.user_id,
        "ship it",
    )
    assert [(v.user_id, v.decision) for v in uow.approvals.votes] == [(ALICE.user_id, "approve")]
    assert uow.event_types == ["comment.created", "request.approved"]
    assert uow.approvals.events[1].data["source"] == "slack"
    [facts] = uow.callbacks.sent
    assert (facts.status, facts.comment, facts.decided_at) == ("approved", "ship it", NOW)
    assert facts.decided_by is not None and facts.decided_by.email == ALICE.email
    assert dict(facts.metadata) == {"ticket": 7}
    # The receipt is issued before the callback, which carries it.
    assert uow.receipts.issued == [(row.id, (ALICE.user_id,))]
    assert facts.receipt_encrypted == f"receipt-of-{row.id}"
    assert uow.notifications.stopped_for == [row.id]
    assert [(c.request_id, c.final) for c in uow.changes] == [(row.id, True)]


async def test_a_vote_short_of_the_bar_sends_no_callback() -> None:
    row = pending_request(required_approvals=2, callback_url="https://hooks.example/x")
    view = RequestView("pending", 2, has_callback=True)
    transition = state.apply(view, state.Decide(actor(ALICE), "approve"), NOW)
    uow = FakeUnitOfWork()
    await apply_transition(uow, row, transition, ALICE, NOW)
    assert uow.approvals.rows[row.id]["current_approvals"] == 1
    assert uow.event_types == ["request.vote_recorded"]
    assert uow.callbacks.sent == []
    assert [c.final for c in uow.changes] == [False]


async def test_a_step_approval_that_leaves_steps_open_writes_only_the_step_event() -> None:
    first, second = uuid.uuid4(), uuid.uuid4()
    chain = (
        StepView(first, 1, ALICE.user_id, "pending"),
        StepView(second, 2, BOB.user_id, "pending"),
    )
    view = RequestView("pending", 2, is_sequential=True, steps=chain, has_callback=True)
    transition = state.apply(view, state.VoteStep(actor(ALICE), first, "approve"), NOW)
    uow = FakeUnitOfWork()
    await apply_transition(uow, pending_request(has_steps=True), transition, ALICE, NOW)
    assert uow.approvals.step_updates == [(first, "approved", ALICE.user_id)]
    assert [v.step_id for v in uow.approvals.votes] == [first]
    assert uow.event_types == ["step.approved"]
    assert uow.callbacks.sent == []
    # The next step of the sequential chain opens: its approver is told.
    assert uow.notifications.steps_opened_for == [uow.approvals.votes[0].request_id]
    assert uow.notifications.opened_approvers == [(BOB.user_id,)]
    assert uow.notifications.stopped_for == []


async def test_a_step_rejection_skips_the_rest_and_rejects_the_request() -> None:
    first, second = uuid.uuid4(), uuid.uuid4()
    chain = (
        StepView(first, 1, ALICE.user_id, "pending"),
        StepView(second, 2, BOB.user_id, "pending"),
    )
    view = RequestView("pending", 2, steps=chain)
    transition = state.apply(view, state.VoteStep(actor(ALICE), first, "reject"), NOW)
    uow = FakeUnitOfWork()
    await apply_transition(uow, pending_request(has_steps=True), transition, ALICE, NOW)
    assert uow.approvals.step_updates == [
        (first, "rejected", ALICE.user_id),
        (second, "skipped", None),
    ]
    assert uow.event_types == ["step.rejected", "request.rejected"]


async def test_expiry_calls_back_with_nobody_deciding_at_the_deadline() -> None:
    deadline = NOW - timedelta(minutes=1)
    row = pending_request(expires_at=deadline, callback_url="https://hooks.example/x")
    view = RequestView("pending", 1, expires_at=deadline, has_callback=True)
    transition = state.apply(view, state.Expire(), NOW)
    uow = FakeUnitOfWork()
    await apply_transition(uow, row, transition, None, NOW)
    assert uow.approvals.rows[row.id]["decided_at"] == deadline
    assert uow.approvals.votes == [] and uow.approvals.comments == []
    [facts] = uow.callbacks.sent
    assert (facts.status, facts.decided_by, facts.decided_at) == ("expired", None, deadline)


def _written(uow: FakeUnitOfWork) -> dict[str, object]:
    """Everything a unit of work was given, new ids aside (each write draws its own)."""
    return {
        "rows": uow.approvals.rows,
        "events": [
            (e.request_id, e.type, e.actor_id, _without_ids(e.data), e.created_at)
            for e in uow.approvals.events
        ],
        "callbacks": uow.callbacks.sent,
        "stopped": uow.notifications.stopped_for,
        "changes": uow.changes,
        "votes": uow.approvals.votes,
        "steps": uow.approvals.step_updates,
    }


def _without_ids(data: dict[str, object]) -> dict[str, object]:
    return {key: value for key, value in data.items() if key != "comment_id"}


async def test_a_batch_of_transitions_writes_what_they_write_one_by_one() -> None:
    deadline = NOW - timedelta(minutes=1)
    step = uuid.uuid4()
    rows_and_views = [
        (
            pending_request(expires_at=deadline, callback_url="https://hooks.example/x"),
            RequestView("pending", 1, expires_at=deadline, has_callback=True),
        ),
        (
            pending_request(expires_at=deadline - timedelta(hours=1), current_approvals=1),
            RequestView("pending", 2, 1, expires_at=deadline - timedelta(hours=1)),
        ),
        (  # a chain: expiry leaves its steps as they are
            pending_request(expires_at=deadline, has_steps=True, callback_url="https://h.example"),
            RequestView(
                "pending", 1, expires_at=deadline, has_callback=True,
                steps=(StepView(step, 1, ALICE.user_id, "pending"),),
            ),
        ),
    ]  # fmt: skip
    items = [(row, state.apply(view, state.Expire(), NOW)) for row, view in rows_and_views]
    one_by_one, batched = FakeUnitOfWork(), FakeUnitOfWork()
    expected = [await apply_transition(one_by_one, row, t, None, NOW) for row, t in items]
    assert await apply_transitions(batched, items, None, NOW) == expected
    assert _written(batched) == _written(one_by_one)
    assert [e.type for e in batched.approvals.events] == ["request.expired"] * 3
    assert len(batched.callbacks.sent) == 2


async def test_a_batch_applies_transitions_it_has_no_batch_form_for_one_by_one() -> None:
    row = pending_request(callback_url="https://hooks.example/x")
    view = RequestView("pending", 1, has_callback=True)
    decide = state.Decide(actor(ALICE), "approve", comment="ok")
    items = [(row, state.apply(view, decide, NOW))]
    one_by_one, batched = FakeUnitOfWork(), FakeUnitOfWork()
    await apply_transition(one_by_one, *items[0], ALICE, NOW)
    await apply_transitions(batched, items, ALICE, NOW)
    assert _written(batched) == _written(one_by_one)
    assert batched.approvals.comments and batched.approvals.votes


async def test_an_operator_cancellation_names_nobody() -> None:
    row = pending_request(callback_url="https://hooks.example/x")
    view = RequestView("pending", 1, has_callback=True)
    transition = state.apply(view, state.Cancel(None), NOW)
    uow = FakeUnitOfWork()
    await apply_transition(uow, row, transition, None, NOW)
    stored = uow.approvals.rows[row.id]
    assert (stored["cancelled_at"], stored["decided_by"]) == (NOW, None)
    assert uow.callbacks.sent[0].decided_by is None


async def test_configuring_steps_replaces_the_chain_and_sets_the_bar() -> None:
    row = pending_request()
    specs = (StepSpec(BOB.user_id, 2), StepSpec(ALICE.user_id, 1))
    view = RequestView("pending", 1, connection_id=row.connection_id)
    creator = actor(ALICE, connection=row.connection_id)
    transition = state.apply(view, state.ConfigureSteps(creator, specs), NOW)
    assert kinds(transition) == [
        "ReplaceSteps",
        "UpdateRequest",
        "WriteEvent",
        "NotifyStepsOpened",
        "PublishChange",
    ]
    uow = FakeUnitOfWork()
    await apply_transition(uow, row, transition, ALICE, NOW)
    assert [s.step_order for s in uow.approvals.steps[row.id]] == [1, 2]
    # A parallel chain opens every step at once: all its approvers are told, in order.
    assert uow.notifications.opened_approvers == [(ALICE.user_id, BOB.user_id)]
    stored = uow.approvals.rows[row.id]
    assert (stored["required_approvals"], stored["has_steps"], stored["status"]) == (
        2,
        True,
        "pending",
    )
    assert uow.event_types == ["steps.configured"]


def test_who_may_configure_steps_and_how_many() -> None:
    connection = uuid.uuid4()
    view = RequestView("pending", 3, connection_id=connection)
    two = (StepSpec(ALICE.user_id, 1), StepSpec(BOB.user_id, 2))
    with pytest.raises(Forbidden):  # a member, not the creating connection
        state.apply(view, state.ConfigureSteps(actor(BOB), two), NOW)
    with pytest.raises(ValidationFailed):  # the creator may not lower the bar
        state.apply(view, state.ConfigureSteps(actor(ALICE, connection=connection), two), NOW)
    lowered = state.apply(view, state.ConfigureSteps(actor(ADMIN, admin=True), two), NOW)
    assert lowered.effects[1] == state.UpdateRequest("pending", 0, required_approvals=2)
    voted = RequestView("pending", 3, connection_id=connection, voters=frozenset({BOB.user_id}))
    with pytest.raises(StepsLocked):
        state.apply(voted, state.ConfigureSteps(actor(ADMIN, admin=True), two), NOW)


def _new_values(key: str | None = None) -> dict[str, object]:
    return {
        "id": uuid.uuid4(),
        "org_id": ORG,
        "connection_id": uuid.uuid4(),
        "title": "Deploy",
        "description": "d",
        "priority": "high",
        "source": "ci",
        "idempotency_key": key,
        "created_at": NOW,
        "updated_at": NOW,
    }


ORG = uuid.uuid4()


async def test_a_create_writes_its_row_event_notification_plan_and_signal() -> None:
    transition = state.apply(None, state.Create(actor(ALICE), "Deploy", "high", "ci"), NOW)
    uow = FakeUnitOfWork()
    values = _new_values()
    created = await apply_create(uow, values, transition, ALICE, NOW)

    assert created is not None and created.id == values["id"] and created.status == "pending"
    assert uow.approvals.inserted == [created]
    [event] = uow.approvals.events
    assert (event.type, event.actor_id, event.request_id) == (
        "request.created",
        ALICE.user_id,
        created.id,
    )
    assert event.data == {"title": "Deploy", "priority": "high", "source": "ci"}
    assert uow.notifications.created_for == [created.id]
    assert [(c.request_id, c.final) for c in uow.changes] == [(created.id, False)]


async def test_a_create_the_storage_plans_itself_writes_no_second_plan() -> None:
    transition = state.apply(None, state.Create(actor(ALICE), "Deploy", "high"), NOW)
    uow = FakeUnitOfWork()
    uow.approvals.can_write_plan_with_insert = True  # PostgreSQL: in the insert's own statement
    assert await apply_create(uow, _new_values(), transition, ALICE, NOW) is not None
    assert uow.notifications.created_for == []


async def test_a_create_whose_key_is_taken_writes_nothing_more() -> None:
    transition = state.apply(None, state.Create(actor(ALICE), "Deploy", "high"), NOW)
    uow = FakeUnitOfWork()
    assert await apply_create(uow, _new_values("k"), transition, ALICE, NOW) is not None
    first = (list(uow.approvals.events), list(uow.notifications.created_for), list(uow.changes))

    assert await apply_create(uow, _new_values("k"), transition, ALICE, NOW) is None
    assert (uow.approvals.events, uow.notifications.created_for, uow.changes) == first
