"""The state machine, walked exhaustively: every (status, action) pair, and the rules."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from signoff.approvals import state
from signoff.approvals.state import (
    Cancel,
    Decide,
    Expire,
    RequestView,
    StepView,
    VoteStep,
    apply,
    effective_status,
)
from signoff.auth.actor import Actor
from signoff.errors import (
    AlreadyVoted,
    AppError,
    Conflict,
    Forbidden,
    NotFound,
    RequestNotPending,
    StepNotPending,
    StepOutOfOrder,
)

NOW = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
ALICE = Actor(uuid.uuid4())
BOB = Actor(uuid.uuid4())
ADMIN = Actor(uuid.uuid4(), is_admin=True)


def steps(*statuses: str, approvers: list[Actor] | None = None) -> tuple[StepView, ...]:
    people = approvers or [ALICE, BOB, Actor(uuid.uuid4())]
    return tuple(
        StepView(uuid.uuid4(), order, people[order - 1].user_id, status)  # type: ignore[arg-type]
        for order, status in enumerate(statuses, start=1)
    )


def actions_for(view: RequestView) -> list[state.Action]:
    step_id = view.steps[0].id if view.steps else uuid.uuid4()
    return [
        Decide(ALICE, "approve"),
        Decide(ALICE, "reject"),
        Decide(ADMIN, "approve"),
        Cancel(ALICE),
        Cancel(None),
        Expire(),
        VoteStep(ALICE, step_id, "approve"),
        VoteStep(ALICE, step_id, "reject"),
    ]


@pytest.mark.parametrize("status", ["approved", "rejected", "cancelled", "expired"])
@pytest.mark.parametrize("with_steps", [False, True])
def test_no_action_leaves_a_terminal_status(status: str, with_steps: bool) -> None:
    view = RequestView(
        status=status,  # type: ignore[arg-type]
        required_approvals=1,
        steps=steps("approved", "skipped") if with_steps else (),
    )
    for action in actions_for(view):
        with pytest.raises(AppError) as refused:
            apply(view, action, NOW)
        if isinstance(refused.value, RequestNotPending):
            assert refused.value.details == {"status": status}
        else:
            # A stranger is refused for who they are before the state is looked at.
            assert isinstance(refused.value, Forbidden | NotFound), (action, refused.value)


def test_every_pair_from_pending_count_based() -> None:
    view = RequestView(status="pending", required_approvals=1)
    outcomes = {}
    for action in actions_for(view):
        try:
            outcomes[type(action).__name__, getattr(action, "decision", None)] = apply(
                view, action, NOW
            ).status
        except AppError as exc:
            outcomes[type(action).__name__, getattr(action, "decision", None)] = exc.code
    assert outcomes == {
        ("Decide", "approve"): "approved",
        ("Decide", "reject"): "rejected",
        ("Cancel", None): "cancelled",
        ("Expire", None): "CONFLICT",  # not due yet
        ("VoteStep", "approve"): "NOT_FOUND",  # no such step
        ("VoteStep", "reject"): "NOT_FOUND",
    }


def test_count_based_needs_distinct_approvers() -> None:
    view = RequestView(status="pending", required_approvals=2)
    first = apply(view, Decide(ALICE, "approve"), NOW)
    assert (first.status, first.current_approvals, first.records_vote) == ("pending", 1, True)
    assert first.event == "request.vote_recorded"
    after_first = RequestView(
        status="pending",
        required_approvals=2,
        current_approvals=1,
        voters=frozenset({ALICE.user_id}),
    )
    with pytest.raises(AlreadyVoted):
        apply(after_first, Decide(ALICE, "approve"), NOW)
    with pytest.raises(AlreadyVoted):
        apply(after_first, Decide(ALICE, "reject"), NOW)
    second = apply(after_first, Decide(BOB, "approve"), NOW)
    assert (second.status, second.current_approvals, second.is_final) == ("approved", 2, True)


def test_one_reject_rejects_a_count_based_request() -> None:
    view = RequestView(
        status="pending",
        required_approvals=3,
        current_approvals=2,
        voters=frozenset({ALICE.user_id}),
    )
    result = apply(view, Decide(BOB, "reject"), NOW)
    assert (result.status, result.current_approvals) == ("rejected", 2)


def test_past_expiry_reads_and_behaves_as_expired() -> None:
    view = RequestView(status="pending", required_approvals=1, expires_at=NOW)
    assert effective_status(view, NOW) == "expired"
    assert effective_status(view, NOW - timedelta(milliseconds=1)) == "pending"
    for action in (Decide(ALICE, "approve"), Cancel(ALICE)):
        with pytest.raises(RequestNotPending) as refused:
            apply(view, action, NOW)
        assert refused.value.details == {"status": "expired"}
    assert apply(view, Expire(), NOW).status == "expired"
    with pytest.raises(Conflict):
        apply(view, Expire(), NOW - timedelta(seconds=1))


def test_steps_approve_in_any_order_when_parallel() -> None:
    chain = steps("pending", "pending")
    view = RequestView(status="pending", required_approvals=2, steps=chain)
    second = apply(view, VoteStep(BOB, chain[1].id, "approve"), NOW)
    assert (second.status, second.current_approvals, second.event) == (
        "pending",
        1,
        "step.approved",
    )
    assert second.step_changes == ((chain[1].id, "approved"),)
    done = RequestView(
        status="pending",
        required_approvals=2,
        current_approvals=1,
        steps=(chain[0], StepView(chain[1].id, 2, chain[1].approver_id, "approved")),
    )
    last = apply(done, VoteStep(ALICE, chain[0].id, "approve"), NOW)
    assert (last.status, last.current_approvals) == ("approved", 2)


def test_sequential_chain_is_voted_in_order() -> None:
    chain = steps("pending", "pending")
    view = RequestView(status="pending", required_approvals=2, is_sequential=True, steps=chain)
    with pytest.raises(StepOutOfOrder):
        apply(view, VoteStep(BOB, chain[1].id, "approve"), NOW)
    assert apply(view, VoteStep(ALICE, chain[0].id, "approve"), NOW).status == "pending"


def test_step_reject_rejects_request_and_skips_the_rest() -> None:
    chain = steps("approved", "pending", "pending")
    view = RequestView(status="pending", required_approvals=3, current_approvals=1, steps=chain)
    result = apply(view, VoteStep(BOB, chain[1].id, "reject"), NOW)
    assert result.status == "rejected"
    assert dict(result.step_changes) == {chain[1].id: "rejected", chain[2].id: "skipped"}


def test_step_votes_need_the_approver_or_an_admin() -> None:
    chain = steps("pending", "pending")
    view = RequestView(status="pending", required_approvals=2, steps=chain)
    with pytest.raises(Forbidden):
        apply(view, VoteStep(BOB, chain[0].id, "approve"), NOW)
    assert apply(view, VoteStep(ADMIN, chain[0].id, "approve"), NOW).status == "pending"
    voted = RequestView(
        status="pending",
        required_approvals=2,
        current_approvals=1,
        steps=(StepView(chain[0].id, 1, ALICE.user_id, "approved"), chain[1]),
    )
    with pytest.raises(StepNotPending):
        apply(voted, VoteStep(ALICE, chain[0].id, "approve"), NOW)


def test_request_level_decisions_with_steps_are_admin_overrides() -> None:
    chain = steps("approved", "pending")
    view = RequestView(status="pending", required_approvals=2, current_approvals=1, steps=chain)
    with pytest.raises(Forbidden):
        apply(view, Decide(ALICE, "approve"), NOW)
    result = apply(view, Decide(ADMIN, "approve"), NOW)
    assert (result.status, result.is_override) == ("approved", True)
    assert result.step_changes == ((chain[1].id, "skipped"),)
