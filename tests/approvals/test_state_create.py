"""Creation is a transition of the state machine: every outcome of ``state.Create``, no I/O."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest

from signoff.approvals import state
from signoff.approvals.state import Create, RequestView, apply
from signoff.auth.actor import Actor
from signoff.errors import Conflict, NotFound

NOW = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
ALICE = Actor(uuid.uuid4())
# A connection whose owner is deactivated still creates (auth/authority.py).
ORPHANED = Actor(uuid.uuid4(), connection_id=uuid.uuid4(), owner_deactivated=True)


@pytest.mark.parametrize("actor", [ALICE, ORPHANED], ids=["member", "owner_deactivated"])
@pytest.mark.parametrize("source", [None, "ci"])
def test_a_create_makes_a_pending_request_with_its_row_event_notifications_and_signal(
    actor: Actor, source: str | None
) -> None:
    transition = apply(None, Create(actor, "Deploy", "high", source), NOW)

    assert (transition.status, transition.current_approvals) == ("pending", 0)
    assert transition.event == "request.created"
    assert not transition.is_final
    assert not transition.records_vote and not transition.is_override
    assert transition.step_changes == ()
    assert transition.effects == (
        state.InsertRequest(),
        state.WriteEvent(
            "request.created", {"title": "Deploy", "priority": "high", "source": source}
        ),
        state.NotifyCreated(),
        state.PublishChange(final=False),
    )


def test_the_row_is_written_before_anything_that_names_it() -> None:
    effects = apply(None, Create(ALICE, "t", "low"), NOW).effects
    assert isinstance(effects[0], state.InsertRequest)
    assert [type(effect) for effect in effects].count(state.InsertRequest) == 1


def test_a_create_sends_no_callback_and_stops_no_reminders() -> None:
    effects = apply(None, Create(ALICE, "t", "low"), NOW).effects
    kinds = {type(effect) for effect in effects}
    assert not kinds & {
        state.UpdateRequest,
        state.RecordVote,
        state.ChangeStep,
        state.ReplaceSteps,
        state.AddComment,
        state.SendCallback,
        state.NotifyStepsOpened,
        state.StopReminders,
    }


def test_a_create_on_a_request_that_exists_is_refused() -> None:
    with pytest.raises(Conflict):
        apply(RequestView("pending", 1), Create(ALICE, "t", "low"), NOW)


@pytest.mark.parametrize(
    "action",
    [
        state.Decide(ALICE, "approve"),
        state.VoteStep(ALICE, uuid.uuid4(), "approve"),
        state.Cancel(ALICE),
        state.Expire(),
        state.ConfigureSteps(ALICE, ()),
    ],
    ids=lambda action: type(action).__name__,
)
def test_every_other_action_needs_a_request(action: state.Action) -> None:
    with pytest.raises(NotFound):
        apply(None, action, NOW)
