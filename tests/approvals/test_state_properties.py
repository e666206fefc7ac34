"""Property-based tests of the state machine: random runs against its invariants.

A run is a random request (count-based, or a chain of steps, sequential or not, maybe
with a deadline) and a random sequence of votes, step votes, request-level decisions
(admin overrides among them), cancellations and clock moves. Each accepted transition
is folded into the snapshot the way the service writes it to the database.
"""

from __future__ import annotations

import dataclasses
import uuid
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from signoff.approvals.state import (
    TERMINAL_STATUSES,
    Cancel,
    Decide,
    Expire,
    RequestView,
    StepView,
    Transition,
    VoteStep,
    apply,
    effective_status,
)
from signoff.auth.actor import Actor
from signoff.errors import AppError

START = datetime(2030, 1, 1, tzinfo=UTC)
USERS = [Actor(uuid.UUID(int=i + 1)) for i in range(4)]
ADMIN = Actor(uuid.UUID(int=99), is_admin=True)
ACTORS = [*USERS, ADMIN]


@dataclasses.dataclass(frozen=True)
class Clock:
    seconds: int


requests = st.builds(
    lambda n_steps, required, sequential, deadline: RequestView(
        status="pending",
        required_approvals=n_steps or required,
        expires_at=START + timedelta(seconds=deadline) if deadline else None,
        is_sequential=sequential,
        steps=tuple(
            StepView(uuid.UUID(int=1000 + i), i + 1, USERS[i].user_id, "pending")
            for i in range(n_steps)
        ),
    ),
    n_steps=st.integers(0, 4),
    required=st.integers(1, 4),
    sequential=st.booleans(),
    deadline=st.one_of(st.none(), st.integers(1, 50)),
)
decisions = st.sampled_from(["approve", "reject"])
actions = st.one_of(
    st.builds(Decide, st.sampled_from(ACTORS), decisions),
    st.builds(
        VoteStep,
        st.sampled_from(ACTORS),
        st.integers(0, 4).map(lambda i: uuid.UUID(int=1000 + i)),
        decisions,
    ),
    st.builds(Cancel, st.one_of(st.none(), st.sampled_from(ACTORS))),
    st.just(Expire()),
    st.builds(Clock, st.integers(1, 20)),
)


def fold(view: RequestView, action: object, transition: Transition) -> RequestView:
    """What the service persists for an accepted transition."""
    changes = dict(transition.step_changes)
    voters = view.voters
    if transition.records_vote and isinstance(action, Decide):
        voters = voters | {action.actor.user_id}
    return dataclasses.replace(
        view,
        status=transition.status,
        current_approvals=transition.current_approvals,
        voters=voters,
        steps=tuple(dataclasses.replace(s, status=changes.get(s.id, s.status)) for s in view.steps),
    )


@settings(max_examples=400, deadline=None)
@given(requests, st.lists(actions, max_size=25))
def test_random_runs_keep_every_invariant(request: RequestView, run: list[object]) -> None:
    view, now = request, START
    overridden = False
    approvals_by_user: list[uuid.UUID] = []
    for action in run:
        if isinstance(action, Clock):
            now += timedelta(seconds=action.seconds)
            continue
        was_final = view.status in TERMINAL_STATUSES
        past_deadline = effective_status(view, now) == "expired"
        try:
            transition = apply(view, action, now)  # type: ignore[arg-type]
        except AppError:
            continue
        # A terminal request never changes again; one past its deadline can only be
        # written down as expired.
        assert not was_final, (view, action)
        assert not past_deadline or transition.status == "expired", (view, action)
        if transition.records_vote and isinstance(action, Decide) and action.decision == "approve":
            approvals_by_user.append(action.actor.user_id)
        overridden = overridden or transition.is_override
        view = fold(view, action, transition)

        assert view.current_approvals <= view.required_approvals
        # No user counts twice.
        assert len(approvals_by_user) == len(set(approvals_by_user))
        if view.steps:
            approved_steps = sum(1 for s in view.steps if s.status == "approved")
            if not overridden:
                assert view.current_approvals == approved_steps
        else:
            assert view.current_approvals == len(approvals_by_user)
        if view.status == "approved":
            if view.steps:
                assert overridden or all(s.status == "approved" for s in view.steps)
            else:
                assert view.current_approvals == view.required_approvals
        if view.status == "rejected" and view.steps and not overridden:
            assert sum(1 for s in view.steps if s.status == "rejected") == 1
            assert all(s.status != "pending" for s in view.steps)
        if view.status in TERMINAL_STATUSES:
            assert all(s.status != "pending" for s in view.steps) or view.status in (
                "cancelled",
                "expired",
            )


@settings(max_examples=200, deadline=None)
@given(requests, st.lists(actions, max_size=25))
def test_sequential_chains_are_approved_in_order(request: RequestView, run: list[object]) -> None:
    view, now = dataclasses.replace(request, is_sequential=True), START
    for action in run:
        if isinstance(action, Clock):
            now += timedelta(seconds=action.seconds)
            continue
        try:
            transition = apply(view, action, now)  # type: ignore[arg-type]
        except AppError:
            continue
        view = fold(view, action, transition)
        # Approved steps always form a prefix of the chain.
        statuses = [s.status for s in view.steps]
        first_not_approved = next(
            (i for i, s in enumerate(statuses) if s != "approved"), len(statuses)
        )
        assert all(s != "approved" for s in statuses[first_not_approved:]), statuses


@given(requests, st.integers(0, 100))
def test_expiry_is_a_function_of_the_clock(request: RequestView, offset: int) -> None:
    now = START + timedelta(seconds=offset)
    expected = (
        "expired" if request.expires_at is not None and now >= request.expires_at else "pending"
    )
    assert effective_status(request, now) == expected
