"""``state.UnreadDecision``: the condition a decision written before its read is made on
(SQLite, ``service._decided_unread``) admits exactly requests on which ``apply`` answers
that decision with the values written, and refuses nothing."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from signoff.approvals.state import (
    REQUEST_STATUSES,
    Decide,
    RequestView,
    StepView,
    UpdateRequest,
    apply,
    decided_unread,
)
from signoff.auth.actor import Actor
from signoff.errors import AppError

NOW = datetime(2030, 1, 1, tzinfo=UTC)
ME = Actor(uuid.UUID(int=1))
OTHER = uuid.UUID(int=2)

views = st.builds(
    lambda status, required, current, voted, deadline, steps: RequestView(
        status=status,
        required_approvals=required,
        current_approvals=current,
        expires_at=NOW + timedelta(seconds=deadline) if deadline is not None else None,
        voters=frozenset({OTHER} if voted and current else ()),
        steps=tuple(StepView(uuid.UUID(int=10 + i), i + 1, OTHER, "pending") for i in range(steps)),
    ),
    status=st.sampled_from(REQUEST_STATUSES),
    required=st.integers(1, 3),
    current=st.integers(0, 2),
    voted=st.booleans(),
    deadline=st.one_of(st.none(), st.integers(-5, 5)),
    steps=st.integers(0, 2),
)
actions = st.builds(
    lambda decision, admin, comment: Decide(
        Actor(ME.user_id, is_admin=admin), decision, comment or None
    ),
    decision=st.sampled_from(["approve", "reject"]),
    admin=st.booleans(),
    comment=st.sampled_from(["", "ok"]),
)


@given(views, actions)
def test_an_admitted_request_is_decided_as_written(view: RequestView, action: Decide) -> None:
    unread = decided_unread(action)
    assert unread is not None
    if not unread.admits(view, NOW):
        return
    transition = apply(view, action, NOW)  # refuses nothing
    update = transition.effects[0]
    assert isinstance(update, UpdateRequest)
    assert (update.status, update.current_approvals) == (unread.status, unread.current_approvals)
    assert update.required_approvals is None and update.edit is None


@given(views, actions)
def test_a_decision_the_condition_refuses_is_one_the_request_is_read_for(
    view: RequestView, action: Decide
) -> None:
    """Outside the condition, the state machine refuses or answers differently (the
    fallback's read decides): nothing the condition leaves out would be written alike."""
    unread = decided_unread(action)
    assert unread is not None
    if unread.admits(view, NOW):
        return
    try:
        transition = apply(view, action, NOW)
    except AppError:
        return
    update = transition.effects[0]
    assert isinstance(update, UpdateRequest)
    different = (update.status, update.current_approvals) != (
        unread.status,
        unread.current_approvals,
    )
    assert different or view.steps or view.current_approvals


def test_edits_and_deactivated_owners_are_always_read_first() -> None:
    assert decided_unread(Decide(ME, "approve", arguments={"a": 1})) is None
    assert decided_unread(Decide(Actor(ME.user_id, owner_deactivated=True), "reject")) is None
