"""Approve with edits in the pure state machine: who may edit, what an edit dismisses or
reopens, and the effects it lists, in order."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest

from signoff.approvals import state
from signoff.approvals.state import Decide, RequestView, VoteStep
from signoff.errors import AlreadyVoted, EditsNotAllowed, ValidationFailed
from signoff.receipts.arguments import arguments_hash
from tests.approvals.test_state import ADMIN, ALICE, BOB, steps

NOW = datetime(2026, 11, 28, tzinfo=UTC)
SCHEMA = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 1}}}
OLD = {"n": 3}
NEW = {"n": 5}


def view(**fields: object) -> RequestView:
    values: dict[str, object] = {
        "status": "pending",
        "required_approvals": 1,
        "arguments": OLD,
        "arguments_schema": SCHEMA,
        "arguments_hash": arguments_hash(OLD),
    }
    values.update(fields)
    return RequestView(**values)  # type: ignore[arg-type]


def kinds(transition: state.Transition) -> list[str]:
    return [type(effect).__name__ for effect in transition.effects]


def test_an_edit_approves_with_its_patch_and_receipt() -> None:
    t = state.apply(view(), Decide(ALICE, "approve", arguments=NEW), NOW)
    assert t.status == "approved" and t.edit is not None
    assert t.edit.patch == ({"op": "replace", "path": "/n", "value": 5},)
    assert t.edit.new_hash == arguments_hash(NEW)
    update = t.effects[0]
    assert isinstance(update, state.UpdateRequest) and update.edit == t.edit
    assert "DismissVotes" not in kinds(t)
    [receipt] = [e for e in t.effects if isinstance(e, state.IssueReceipt)]
    assert receipt.decided_by == (ALICE.user_id,)
    events = [e.type for e in t.effects if isinstance(e, state.WriteEvent)]
    assert events == ["arguments.edited", "request.approved"]


def test_count_based_edit_dismisses_and_asks_again() -> None:
    earlier = view(required_approvals=3, current_approvals=1, voters=frozenset({BOB.user_id}))
    t = state.apply(earlier, Decide(ALICE, "approve", arguments=NEW), NOW)
    assert (t.status, t.current_approvals, t.asked_again) == ("pending", 1, (BOB.user_id,))
    assert kinds(t)[:3] == ["UpdateRequest", "DismissVotes", "RecordVote"]
    [asked] = [e for e in t.effects if isinstance(e, state.AskAgain)]
    assert asked.user_ids == (BOB.user_id,)
    assert not [e for e in t.effects if isinstance(e, state.NotifyStepsOpened)]
    with pytest.raises(AlreadyVoted):
        state.apply(earlier, Decide(BOB, "approve", arguments=NEW), NOW)


def test_a_parallel_chain_edit_reopens_approved_steps() -> None:
    chain = steps("approved", "pending")
    t = state.apply(view(steps=chain), VoteStep(BOB, chain[1].id, "approve", arguments=NEW), NOW)
    assert t.status == "pending" and t.current_approvals == 1
    assert dict(t.step_changes) == {chain[1].id: "approved", chain[0].id: "pending"}
    [asked] = [e for e in t.effects if isinstance(e, state.AskAgain)]
    assert asked.user_ids == (ALICE.user_id,)


def test_an_override_with_an_edit_approves_outright() -> None:
    chain = steps("approved", "pending")
    t = state.apply(view(steps=chain), Decide(ADMIN, "approve", arguments=NEW), NOW)
    assert t.status == "approved" and t.is_override and t.edit is not None
    assert "DismissVotes" not in kinds(t)


def test_refusals() -> None:
    with pytest.raises(EditsNotAllowed):
        state.apply(view(arguments_schema=None), Decide(ALICE, "approve", arguments=NEW), NOW)
    with pytest.raises(ValidationFailed):
        state.apply(view(), Decide(ALICE, "reject", arguments=NEW), NOW)
    with pytest.raises(ValidationFailed) as broken:
        state.apply(view(), Decide(ALICE, "approve", arguments={"n": 0}), NOW)
    assert broken.value.details["fields"][0]["pointer"] == "/n"
    same = state.apply(view(), Decide(ALICE, "approve", arguments=dict(OLD)), NOW)
    assert same.edit is None and same.status == "approved"


def test_a_stranger_is_refused_before_the_edit_is_looked_at() -> None:
    chain = steps("pending", "pending")
    stranger = VoteStep(state.Actor(uuid.uuid4()), chain[0].id, "approve", arguments={"n": 0})
    with pytest.raises(Exception) as refused:
        state.apply(view(steps=chain), stranger, NOW)
    assert type(refused.value).__name__ == "Forbidden"
