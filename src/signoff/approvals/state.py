"""The one gate for status changes of an approval request.

``apply(request, action, now)`` is a pure function: it sees a snapshot of the request (its
votes and steps included; None for a ``Create``), an action and the clock, and answers
with the ``Transition`` to make or raises the typed refusal (an ``AppError``) the caller
must get. It does no I/O, so
every (status, action) pair is tested exhaustively in milliseconds; the service applies
the transition to the database and dispatches its side effects in one place.

Rules (decisions.md sections 2 and 3):
- A request is created pending, with no approvals yet.
- Only a pending request changes; approved, rejected, cancelled and expired are final.
- A pending request past ``expires_at`` *is* expired for every read and write, whether or
  not the sweep has marked it yet.
- Count-based (no steps): each approve by a distinct user counts; at ``required_approvals``
  the request is approved. One reject rejects. A user votes once.
- Steps: a step approve approves that step, and the request once every step is approved;
  a step reject rejects the request and skips the remaining steps. Sequential chains are
  voted in order. Only a step's approver or an admin may vote it; only an admin may decide
  a request with steps directly (an override that skips the pending steps).
- Group steps (a quorum): any active member of the step's group (or an admin) votes it,
  once; it is approved at its ``required_approvals`` distinct approvals, and one member's
  reject rejects it, and so the request.
- Approve with edits (``Decide``/``VoteStep`` with ``arguments``): only an approve, only
  on a request with an ``arguments_schema``, whose edited arguments satisfy it. Votes on
  the old arguments no longer count: a count-based request's earlier approvals are
  dismissed (those people are asked again), a chain's approved steps reopen; the edit
  counts as the editor's approval. Arguments equal to the request's are no edit. On a
  chain with group steps, every vote cast on a group step is dismissed too: approved
  steps reopen, counts restart at zero, and the edit is the editor's vote (for whom they
  stand in, if a delegate) on the step they decide, counted toward its quorum.
- Configuring steps: an admin, or the connection that created the request, while it is
  pending and nobody has voted; only an admin may configure fewer steps than the request
  needs approvals now.

Every transition lists what it causes, in order, as ``effects``: the new request's row,
or the request's new state, the vote, step changes, the comment, audit events, the callback, the
notifications and the live-update signal. ``approvals/effects.py`` applies them over
the unit of work; nothing else writes a consequence of a status change.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Literal

import jsonpatch

from signoff.auth.actor import Actor
from signoff.errors import (
    AlreadyVoted,
    Conflict,
    EditsNotAllowed,
    Forbidden,
    NotFound,
    OwnerDeactivated,
    RequestNotPending,
    StepNotPending,
    StepOutOfOrder,
    StepsLocked,
    ValidationFailed,
)
from signoff.receipts.arguments import arguments_hash, check_against_schema

RequestStatus = Literal["pending", "approved", "rejected", "cancelled", "expired"]
StepStatus = Literal["pending", "approved", "rejected", "skipped"]
Decision = Literal["approve", "reject"]

REQUEST_STATUSES: tuple[RequestStatus, ...] = (
    "pending",
    "approved",
    "rejected",
    "cancelled",
    "expired",
)
TERMINAL_STATUSES: frozenset[str] = frozenset({"approved", "rejected", "cancelled", "expired"})


@dataclass(frozen=True)
class StepView:
    id: uuid.UUID
    step_order: int
    approver_id: uuid.UUID | None  # None: a group's step
    status: StepStatus
    decided_by: uuid.UUID | None = None  # who voted it, once voted
    # A group's step (a quorum): the group, its active members now, how many of them
    # must approve, how many did, and who voted it so far.
    group_id: uuid.UUID | None = None
    members: frozenset[uuid.UUID] = frozenset()
    required_approvals: int = 1
    current_approvals: int = 0
    voters: frozenset[uuid.UUID] = frozenset()  # who cast a vote, and who it was cast for


@dataclass(frozen=True)
class RequestView:
    """What the state machine needs to know of a request, and nothing more."""

    status: RequestStatus
    required_approvals: int
    current_approvals: int = 0
    expires_at: datetime | None = None
    is_sequential: bool = False
    voters: frozenset[uuid.UUID] = frozenset()
    steps: tuple[StepView, ...] = ()
    connection_id: uuid.UUID | None = None  # the connection that created it
    has_callback: bool = False
    # What an edit is checked against and compared with (approve with edits).
    arguments: Mapping[str, Any] | None = None
    arguments_schema: Mapping[str, Any] | None = None
    arguments_hash: str = ""

    @property
    def has_votes(self) -> bool:
        """Whether anyone voted: a count-based vote, a step decided, or a vote on a group
        step short of its quorum (still pending, but voted)."""
        return bool(self.voters) or any(s.status != "pending" or s.voters for s in self.steps)


@dataclass(frozen=True)
class PolicyVerdict:
    """A policy rule decided a new request (``policies/``): it is created approved
    (``auto_approve``) or rejected (``auto_reject``, with its reason). ``data`` names the
    rule and the document's version, for the audit event. A standing approval's verdict
    (``by="standing_approval"``) is an approval whose ``data`` names the standing
    approval instead."""

    decision: Decision
    data: Mapping[str, Any]
    reason: str | None = None
    by: Literal["policy", "standing_approval"] = "policy"


@dataclass(frozen=True)
class Create:
    """A new request (``POST /approvals``), its fields validated already. Nothing
    refuses it here: who may create is the caller's to check, and an idempotency key
    already taken is found by the write itself (``InsertRequest``).

    ``policy``: the verdict of the org's policies, which makes the create a decision
    too; ``notes``: audit events the policies add (a budget spent, why the request goes
    to people), as (type, data)."""

    actor: Actor
    title: str
    priority: str
    source: str | None = None
    policy: PolicyVerdict | None = None
    has_callback: bool = False
    notes: tuple[tuple[str, Mapping[str, Any]], ...] = ()


@dataclass(frozen=True)
class Decide:
    """A request-level approve or reject (``PATCH /approvals/:id``)."""

    actor: Actor
    decision: Decision
    comment: str | None = None
    source: str | None = None
    # Made from a notification ("email", "slack", ...): the audit event records it.
    via: str | None = None
    # Approve with edits: the arguments the action is to run with instead.
    arguments: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class VoteStep:
    actor: Actor
    step_id: uuid.UUID
    decision: Decision
    comment: str | None = None
    source: str | None = None
    via: str | None = None
    arguments: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class ArgumentsEdit:
    """An approver's edit of the arguments: the new ones, the RFC 6902 patch from the
    request's current ones, and both hashes."""

    arguments: Mapping[str, Any]
    patch: tuple[Mapping[str, Any], ...]
    previous_hash: str
    new_hash: str


@dataclass(frozen=True)
class StepSpec:
    approver_id: uuid.UUID | None
    step_order: int
    # A group's step instead of a person's: the group, and how many distinct members must
    # approve it.
    group_id: uuid.UUID | None = None
    required_approvals: int = 1


@dataclass(frozen=True)
class ConfigureSteps:
    """Replace the chain (``POST /approvals/:id/steps``); approvers already checked to be
    users of the org (that needs the database)."""

    actor: Actor
    steps: tuple[StepSpec, ...]


@dataclass(frozen=True)
class Cancel:
    actor: Actor | None  # None: the operator, acting for no user


@dataclass(frozen=True)
class Expire:
    """The clock passed ``expires_at``; applied by the sweep (or lazily by a write)."""


Action = Create | Decide | VoteStep | Cancel | Expire | ConfigureSteps

# What the audit trail records for a transition; see ``Transition.event``.
EventType = Literal[
    "request.created",
    "request.vote_recorded",
    "request.approved",
    "request.rejected",
    "request.cancelled",
    "request.expired",
    "step.approved",
    "step.vote_recorded",
    "steps.configured",
    "arguments.edited",
]


StepChanges = tuple[tuple[uuid.UUID, StepStatus], ...]


# ---- what a transition causes (applied by approvals/effects.py, in this order) ----


@dataclass(frozen=True)
class InsertRequest:
    """Write the new request's row, unless the org's request with its idempotency key
    exists: then nothing that follows is written, and the caller answers with that one."""


@dataclass(frozen=True)
class UpdateRequest:
    """Write the request's new state (a compare-and-set on a pending row)."""

    status: RequestStatus
    current_approvals: int
    required_approvals: int | None = None  # a configured chain sets the bar anew
    comment: str | None = None  # the deciding comment, on a final transition
    edit: ArgumentsEdit | None = None  # approve with edits: the new arguments


@dataclass(frozen=True)
class DismissVotes:
    """Approve with edits: every vote cast so far (all approvals, on a pending request) was
    on the old arguments and no longer counts; it is deleted, so its voter may vote again."""


@dataclass(frozen=True)
class RecordVote:
    decision: Decision
    comment: str | None
    step_id: uuid.UUID | None = None
    # The away approver, or away member of a group step's group, it is cast for.
    on_behalf_of: uuid.UUID | None = None


@dataclass(frozen=True)
class ChangeStep:
    step_id: uuid.UUID
    status: StepStatus
    voted: bool  # by this action's actor (else skipped by it)
    comment: str | None = None
    # A group step's approvals counted with this vote (None: a person's step).
    approvals: int | None = None


@dataclass(frozen=True)
class ReplaceSteps:
    steps: tuple[StepSpec, ...]


@dataclass(frozen=True)
class AddComment:
    body: str


@dataclass(frozen=True)
class WriteEvent:
    type: str
    data: Mapping[str, Any]


@dataclass(frozen=True)
class IssueReceipt:
    """The signed receipt of an approval (``receipts/``): written with the decision,
    before its callback, which carries it. ``decided_by``: the approvers' user ids (an
    override's: the admin's)."""

    decided_by: tuple[uuid.UUID, ...]


@dataclass(frozen=True)
class SendCallback:
    """The decision callback (outbox row, committed with the decision)."""

    comment: str | None


@dataclass(frozen=True)
class NotifyCreated:
    """Tell whom the routing rules name of the new request, from the outbox: one plan
    row, written only where its org can notify anyone; a worker plans and sends."""


@dataclass(frozen=True)
class NotifyStepsOpened:
    """Tell the approvers of the steps now open (routing rules), from the outbox.

    ``approver_ids``: theirs, in step order, known from the chain the transition was made
    on, so that writing the effect reads nothing (a step vote is then one statement on
    PostgreSQL, ``effects.writes_in_one_statement``)."""

    approver_ids: tuple[uuid.UUID, ...]
    # The groups of the group steps now open: every active member is told.
    group_ids: tuple[uuid.UUID, ...] = ()


@dataclass(frozen=True)
class AskAgain:
    """An edit of the arguments dismissed these people's votes: ask them again, from the
    outbox (those who may vote the request when it is planned and have not since)."""

    user_ids: tuple[uuid.UUID, ...]


@dataclass(frozen=True)
class StopReminders:
    """The request left pending: its scheduled reminders and escalations are void."""


@dataclass(frozen=True)
class PublishChange:
    """Wake long polls and live pages watching the request, once the change commits."""

    final: bool


Effect = (
    InsertRequest
    | UpdateRequest
    | DismissVotes
    | RecordVote
    | ChangeStep
    | ReplaceSteps
    | AddComment
    | WriteEvent
    | IssueReceipt
    | SendCallback
    | NotifyCreated
    | NotifyStepsOpened
    | AskAgain
    | StopReminders
    | PublishChange
)


@dataclass(frozen=True)
class Transition:
    status: RequestStatus
    current_approvals: int
    event: EventType
    # A count-based vote to record (request-level approve/reject by a non-override actor).
    records_vote: bool = False
    # Steps whose status changes, as (step id, new status).
    step_changes: StepChanges = field(default_factory=tuple)
    # An admin decided a request with steps directly.
    is_override: bool = False
    # Approve with edits: the edit, and whom it asks again (dismissed voters, reopened
    # steps' approvers).
    edit: ArgumentsEdit | None = None
    asked_again: tuple[uuid.UUID, ...] = ()
    # A group step's vote: the step and its approvals once the vote counts.
    step_count: tuple[uuid.UUID, int] | None = None
    # Everything the transition causes, in the order it is written (see above).
    effects: tuple[Effect, ...] = ()

    @property
    def is_final(self) -> bool:
        return self.status in TERMINAL_STATUSES


def effective_status(request: RequestView, now: datetime) -> RequestStatus:
    if request.status == "pending" and is_past_expiry(request.expires_at, now):
        return "expired"
    return request.status


def is_past_expiry(expires_at: datetime | None, now: datetime) -> bool:
    return expires_at is not None and now >= expires_at


def apply(request: RequestView | None, action: Action, now: datetime) -> Transition:
    """The transition ``action`` makes on ``request`` at ``now``, with its effects, or
    raise its refusal. ``request`` is None for a ``Create`` only: the one action on a
    request that does not exist yet."""
    if isinstance(action, Create):
        if request is not None:
            raise Conflict("The request exists already.")
        return _create(action)
    if request is None:
        raise NotFound("No approval request with this id.")
    transition = _decide_transition(request, action, now)
    return replace(transition, effects=_effects(request, action, transition))


@dataclass(frozen=True)
class UnreadDecision:
    """A request-level decision (``Decide``) the storage may write before reading the
    request, as one compare-and-set: the new ``status`` and ``current_approvals``, made
    only on a request that is pending and not past ``expires_at``, has no steps, counts no
    approval yet (so no voters: each count-based vote is an approval the row counts), and,
    for an approval, needs at most ``most_required`` approvals. On exactly those requests
    ``apply`` answers the decision with these two values and refuses nothing (``admits``;
    the storage's condition is built from these fields). On any other request the write
    changes nothing, and the request is read and decided as ever."""

    status: RequestStatus
    current_approvals: int
    most_required: int | None  # None: any number (a reject)
    # What the request held before, under the condition.
    status_before: RequestStatus = "pending"
    approvals_before: int = 0

    def admits(self, request: RequestView, now: datetime) -> bool:
        """Whether the condition holds for ``request`` at ``now`` (its Python form)."""
        return (
            request.status == self.status_before
            and not is_past_expiry(request.expires_at, now)
            and not request.steps
            and request.current_approvals == self.approvals_before
            and (self.most_required is None or request.required_approvals <= self.most_required)
        )


def decided_unread(action: Action) -> UnreadDecision | None:
    """What ``action`` writes without a read of its request (``UnreadDecision``), if it
    may: a plain approve or reject of a request, by a person whose authority stands (a
    deactivated owner's connection is refused whatever the request), without edits
    (those are checked against the request's schema)."""
    if not isinstance(action, Decide) or action.arguments is not None:
        return None
    if action.actor.owner_deactivated:
        return None
    if action.decision == "reject":
        return UnreadDecision("rejected", 0, None)
    return UnreadDecision("approved", 1, 1)


def _create(action: Create) -> Transition:
    """A new request: pending, no approvals; its row, its event, its notifications. A
    policy's verdict creates it decided instead: its decision's event, receipt and
    callback as for a person's, and no notification (nobody has anything to do)."""
    data = {"title": action.title, "priority": action.priority, "source": action.source}
    effects: list[Effect] = [InsertRequest(), WriteEvent("request.created", data)]
    effects.extend(WriteEvent(kind, note) for kind, note in action.notes)
    verdict = action.policy
    if verdict is None:
        effects += [NotifyCreated(), PublishChange(final=False)]
        return Transition("pending", 0, "request.created", effects=tuple(effects))
    status: RequestStatus = "approved" if verdict.decision == "approve" else "rejected"
    event: EventType = "request.approved" if status == "approved" else "request.rejected"
    decided: dict[str, Any] = {
        "status": status,
        "decision": verdict.decision,
        verdict.by: dict(verdict.data),
    }
    if verdict.reason:
        decided["comment"] = verdict.reason
    effects.append(WriteEvent(event, decided))
    if status == "approved":
        effects.append(IssueReceipt(()))
    if action.has_callback:
        effects.append(SendCallback(verdict.reason))
    effects.append(PublishChange(final=True))
    return Transition(status, 0, event, effects=tuple(effects))


def _decide_transition(request: RequestView, action: Action, now: datetime) -> Transition:
    if isinstance(action, Expire):
        return _expire(request, now)
    if isinstance(action, ConfigureSteps):
        return _configure_steps(request, action, now)
    assert not isinstance(action, Create)  # answered by ``apply``
    _check_owner_authority(request, action)
    if isinstance(action, VoteStep):
        # Who may vote is checked before the request's state, so the answer to a stranger
        # does not depend on what happened to the request.
        step = _find_step(request, action.step_id)
        if not (_may_vote_for(action.actor, step) or action.actor.is_admin):
            raise Forbidden(
                "Only the step's approver, their delegate while they are away, or an admin "
                "may vote on this step."
            )
    if isinstance(action, Decide) and request.steps and not action.actor.is_admin:
        raise Forbidden(
            "This request has approval steps: vote on your step, or ask an admin to override."
        )
    status = effective_status(request, now)
    if status != "pending":
        raise RequestNotPending(status)
    edit = _edit(request, action) if isinstance(action, Decide | VoteStep) else None
    if edit is not None:
        return _edited_vote(request, action, edit)  # type: ignore[arg-type]
    match action:
        case Cancel():
            return Transition("cancelled", request.current_approvals, "request.cancelled")
        case Decide() if request.steps:
            return _override(request, action.decision)
        case Decide():
            return _count_based_vote(request, action)
        case VoteStep():
            return _step_vote(request, action)
    raise AssertionError(f"unhandled action {action!r}")  # pragma: no cover


def _edit(request: RequestView, action: Decide | VoteStep) -> ArgumentsEdit | None:
    """The edit ``action`` makes to the arguments, or None (none given, or the same ones);
    raise when it may not be made."""
    if action.arguments is None:
        return None
    if action.decision != "approve":
        raise ValidationFailed.for_field(
            "arguments", "only an approval may edit the arguments; a reject takes none"
        )
    if request.arguments_schema is None:
        raise EditsNotAllowed()
    check_against_schema(action.arguments, request.arguments_schema)
    new_hash = arguments_hash(action.arguments)
    if new_hash == request.arguments_hash:
        return None
    patch = jsonpatch.make_patch(dict(request.arguments or {}), dict(action.arguments))
    return ArgumentsEdit(
        dict(action.arguments), tuple(patch.patch), request.arguments_hash, new_hash
    )


def _edited_vote(
    request: RequestView, action: Decide | VoteStep, edit: ArgumentsEdit
) -> Transition:
    """An approve with edits: the votes on the old arguments no longer count, the edit is
    the editor's approval (an admin's override of a chain approves it outright)."""
    if isinstance(action, Decide) and request.steps:
        return replace(_override(request, "approve"), edit=edit)
    if isinstance(action, Decide):
        if action.actor.user_id in request.voters:
            raise AlreadyVoted()
        status: RequestStatus = "approved" if request.required_approvals <= 1 else "pending"
        event: EventType = "request.approved" if status == "approved" else "request.vote_recorded"
        again = tuple(sorted(request.voters, key=str)) if status == "pending" else ()
        return Transition(status, 1, event, records_vote=True, edit=edit, asked_again=again)
    voted = replace(_step_vote(request, action), edit=edit)  # the step's own refusals
    step = _find_step(request, action.step_id)
    # The edit is the step's first vote: a group step counts it alone toward its quorum.
    approved = step.group_id is None or step.required_approvals <= 1
    others = [s for s in request.steps if s.id != step.id]
    reopened = [s for s in others if s.status == "approved"]
    # A group step short of its quorum restarts at zero: its votes were dismissed.
    recounted = [s for s in others if s.status == "pending" and s.voters]
    changes: StepChanges = (
        *(((step.id, "approved"),) if approved else ()),
        *((s.id, "pending") for s in (*reopened, *recounted)),
    )
    done = approved and len(request.steps) == 1
    step_event: EventType = "request.approved" if done else "step.approved"
    return replace(
        voted,
        status="approved" if done else "pending",
        current_approvals=1 if approved else 0,
        event=step_event if approved else "step.vote_recorded",
        step_changes=changes,
        step_count=(step.id, 1) if step.group_id is not None else None,
        asked_again=_dismissed_voters(request, action),
    )


def _dismissed_voters(request: RequestView, action: VoteStep) -> tuple[uuid.UUID, ...]:
    """Whom an edit on a chain asks again: the approver of each approved person's step,
    and everyone who voted a group step (and the member a delegate voted for), but the
    editor and the one they stand in for."""
    editor = {action.actor.user_id, _on_behalf_of(request, action)}
    asked: list[uuid.UUID] = []
    for step in sorted(request.steps, key=lambda s: s.step_order):
        if step.group_id is not None:
            asked.extend(sorted(step.voters, key=str))
        elif step.status == "approved" and step.approver_id is not None:
            asked.append(step.approver_id)
    return tuple(u for u in dict.fromkeys(asked) if u not in editor)


def dismissed_step_votes(request: RequestView) -> dict[str, list[str]]:
    """The group steps' votes an edit dismisses, by step id: who cast them, and whom a
    delegate cast one for."""
    return {
        str(step.id): sorted(str(v) for v in step.voters)
        for step in sorted(request.steps, key=lambda s: s.step_order)
        if step.group_id is not None and step.voters
    }


def _may_vote_for(actor: Actor, step: StepView) -> bool:
    if step.approver_id is None:  # a group's step: its active members, and their delegates
        return actor.user_id in step.members or bool(step.members & actor.stands_in_for)
    return step.approver_id == actor.user_id or step.approver_id in actor.stands_in_for


def _on_behalf_of(request: RequestView, action: VoteStep) -> uuid.UUID | None:
    """The away approver a delegate votes for ("Bob for Ann"); None for one's own step
    (or an admin's vote on a step that is nobody's they stand in for).

    On a group's step: None for a member of the group (they vote as themselves, once:
    standing in for another member gives nobody a second vote), else the first away
    member they stand in for who has not voted yet (or, all having voted, the first of
    them: ``_step_vote`` refuses it)."""
    step = _find_step(request, action.step_id)
    actor = action.actor
    if step.approver_id is None:
        if actor.user_id in step.members:
            return None
        stood_in = sorted(step.members & actor.stands_in_for, key=str)
        first = group_stand_in(step.members, step.voters, actor.user_id, actor.stands_in_for)
        return first or (stood_in[0] if stood_in else None)
    approver = step.approver_id
    if approver != actor.user_id and approver in actor.stands_in_for:
        return approver
    return None


def group_stand_in(
    members: Collection[uuid.UUID],
    voters: Collection[uuid.UUID],
    user_id: uuid.UUID,
    stands_in_for: Collection[uuid.UUID],
) -> uuid.UUID | None:
    """Whom a vote of ``user_id`` on a group's step (its active ``members``; ``voters``
    counted so far) counts for: None when they are a member (their own vote), else the
    first away member they stand in for whose vote is not cast yet, if any."""
    if user_id in members:
        return None
    waiting = sorted((m for m in members if m in stands_in_for and m not in voters), key=str)
    return waiting[0] if waiting else None


def _check_owner_authority(request: RequestView, action: Action) -> None:
    """A connection whose owner is deactivated carries no person's authority: it decides
    and votes on nothing, and cancels only the requests it created (auth/authority.py
    refuses the rest of what it may not do before any request is read)."""
    actor = action.actor if isinstance(action, Decide | VoteStep | Cancel) else None
    if actor is None or not actor.owner_deactivated:
        return
    if isinstance(action, Cancel) and request.connection_id == actor.connection_id:
        return
    raise OwnerDeactivated(
        "The owner of this connection is deactivated: it may cancel only the requests it "
        "created, and decides or votes on none.",
        {"connection_id": str(actor.connection_id), "owner_id": str(actor.user_id)},
    )


def _configure_steps(request: RequestView, action: ConfigureSteps, now: datetime) -> Transition:
    actor = action.actor
    created_it = actor.connection_id is not None and actor.connection_id == request.connection_id
    if not (actor.is_admin or created_it):
        raise Forbidden(
            "Only an admin, or the connection that created the request, may configure its steps."
        )
    status = effective_status(request, now)
    if status != "pending":
        raise RequestNotPending(status)
    if request.has_votes:
        raise StepsLocked("Votes have been cast on this request; its chain can no longer change.")
    if len(action.steps) < request.required_approvals and not actor.is_admin:
        raise ValidationFailed.for_field(
            "steps",
            f"the request needs {request.required_approvals} approvals; only an admin may "
            "configure fewer steps than that",
        )
    return Transition("pending", 0, "steps.configured")


# ---- effects ----


def _effects(request: RequestView, action: Action, transition: Transition) -> tuple[Effect, ...]:
    """What ``transition`` causes, in the order it is written."""
    if isinstance(action, ConfigureSteps):
        return _configure_effects(request, action)
    comment = action.comment if isinstance(action, Decide | VoteStep) else None
    step_id = action.step_id if isinstance(action, VoteStep) else None
    effects: list[Effect] = [
        UpdateRequest(
            transition.status,
            transition.current_approvals,
            comment=comment if transition.is_final else None,
            edit=transition.edit,
        )
    ]
    if transition.edit is not None and request.has_votes and not transition.is_override:
        effects.append(DismissVotes())
    if isinstance(action, Decide | VoteStep) and (transition.records_vote or step_id):
        stood_in = _on_behalf_of(request, action) if isinstance(action, VoteStep) else None
        effects.append(RecordVote(action.decision, comment, step_id, stood_in))
    counted = dict([transition.step_count]) if transition.step_count else {}
    effects.extend(
        ChangeStep(
            sid,
            status,
            voted=sid == step_id,
            comment=comment if sid == step_id else None,
            approvals=counted.get(sid),
        )
        for sid, status in transition.step_changes
    )
    if transition.step_count and transition.step_count[0] not in dict(transition.step_changes):
        # A group step's vote that does not reach its quorum: the step counts it.
        voted_step, approvals = transition.step_count
        effects.append(ChangeStep(voted_step, "pending", True, approvals=approvals))
    if comment:
        effects.append(AddComment(comment))
    effects.extend(_audit_events(request, action, transition))
    if transition.status == "approved" and isinstance(action, Decide | VoteStep):
        effects.append(IssueReceipt(_approvers(request, action, transition)))
    if transition.is_final and request.has_callback:
        effects.append(SendCallback(comment))
    effects.extend(_told(request, action, transition))
    effects.append(PublishChange(final=transition.is_final))
    return tuple(effects)


def _told(request: RequestView, action: Action, transition: Transition) -> list[Effect]:
    """Who is told of a decision or a vote: reminders stop on a final one; an edit asks
    again those whose votes it dismissed; a sequential chain's next step opens."""
    if transition.is_final:
        return [StopReminders()]
    told: list[Effect] = []
    if transition.edit is not None:
        if transition.asked_again:
            # Their votes were on the old arguments (on a sequential chain, those of its
            # open step are asked now; the others when their steps open).
            told.append(AskAgain(transition.asked_again))
        if isinstance(action, VoteStep) and request.is_sequential:
            # A step never open before may open (none reopened before it).
            opened = _open_steps(request, transition.step_changes)
            if opened and opened != _open_steps(request, ()) and opened[0].status == "pending":
                told.append(_notify_opened(opened))
    elif isinstance(action, VoteStep) and request.is_sequential and transition.step_changes:
        # The next step of the chain opens.
        told.append(_notify_opened(_open_steps(request, transition.step_changes)))
    return told


def _configure_effects(request: RequestView, action: ConfigureSteps) -> tuple[Effect, ...]:
    ordered = tuple(sorted(action.steps, key=lambda spec: spec.step_order))
    listed = [_listed(s) for s in ordered]
    # Every new step is pending: a sequential chain opens its first, a parallel one all.
    opened = ordered[:1] if request.is_sequential else ordered
    return (
        ReplaceSteps(ordered),
        UpdateRequest("pending", 0, required_approvals=len(ordered)),
        WriteEvent("steps.configured", {"steps": listed}),
        _notify_opened(opened),
        PublishChange(final=False),
    )


def _listed(spec: StepSpec) -> dict[str, Any]:
    """A configured step as the audit event lists it."""
    if spec.group_id is None:
        return {"step_order": spec.step_order, "approver_id": str(spec.approver_id)}
    return {
        "step_order": spec.step_order,
        "group_id": str(spec.group_id),
        "required_approvals": spec.required_approvals,
    }


def _notify_opened(steps: Sequence[StepSpec | StepView]) -> NotifyStepsOpened:
    """Tell the approvers of ``steps``, now open: each person, and each group's members."""
    return NotifyStepsOpened(
        tuple(s.approver_id for s in steps if s.approver_id is not None),
        tuple(s.group_id for s in steps if s.group_id is not None),
    )


def _approvers(
    request: RequestView, action: Decide | VoteStep, transition: Transition
) -> tuple[uuid.UUID, ...]:
    """Who approved, as the receipt names them: an override's admin alone; else every
    approving voter (a chain: each approved step's voter), this action's actor included."""
    actor = action.actor.user_id
    if transition.is_override or transition.edit is not None:
        # An edit dismissed every earlier approval: the editor alone approved these.
        return (actor,)
    if request.steps:
        earlier = []
        for step in sorted(request.steps, key=lambda s: s.step_order):
            if step.group_id is not None and (step.status == "approved" or step.voters):
                earlier.extend(sorted(step.voters, key=str))  # a group's approving members
            elif step.status == "approved":
                earlier.append(step.decided_by or step.approver_id)  # type: ignore[arg-type]
    else:
        earlier = sorted(request.voters, key=str)
    return tuple(dict.fromkeys([*earlier, actor]))


def _open_steps(request: RequestView, step_changes: StepChanges) -> tuple[StepView, ...]:
    """The sequential chain's first step still pending once ``step_changes`` are made
    (none when every step is decided)."""
    changed = dict(step_changes)
    for step in sorted(request.steps, key=lambda s: s.step_order):
        if changed.get(step.id, step.status) == "pending":
            return (step,)
    return ()


def _audit_events(request: RequestView, action: Action, transition: Transition) -> list[WriteEvent]:
    """The step's event (a step vote), then the request's (unless only a step moved)."""
    data: dict[str, Any] = {
        "status": transition.status,
        "current_approvals": transition.current_approvals,
        "required_approvals": request.required_approvals,
    }
    if isinstance(action, Decide | VoteStep):
        data["decision"] = action.decision
        if action.comment:
            data["comment"] = action.comment
        if action.source:
            data["source"] = action.source
        if action.via:
            data["via"] = action.via
    if isinstance(action, VoteStep) and (stood_in := _on_behalf_of(request, action)):
        data["on_behalf_of"] = str(stood_in)
    if transition.is_override:
        data["override"] = True
        data["skipped_steps"] = [str(sid) for sid, _ in transition.step_changes]
    events = []
    if transition.edit is not None:
        data["arguments_edited"] = True
        events.append(_edited_event(request, action, transition, transition.edit))
    if isinstance(action, VoteStep):
        step_status = dict(transition.step_changes).get(action.step_id, "vote_recorded")
        if transition.step_count is not None:
            data["step_current_approvals"] = transition.step_count[1]
        step_data = {**data, "step_id": str(action.step_id), "step_status": step_status}
        events.append(WriteEvent(f"step.{step_status}", step_data))
    if transition.event not in ("step.approved", "step.vote_recorded"):
        events.append(WriteEvent(transition.event, data))
    return events


def _edited_event(
    request: RequestView, action: Action, transition: Transition, edit: ArgumentsEdit
) -> WriteEvent:
    """``arguments.edited``: the patch, both hashes, and that the edit is the editor's
    approval, the earlier ones dismissed."""
    data: dict[str, Any] = {
        "patch": [dict(op) for op in edit.patch],
        "previous_arguments_hash": edit.previous_hash,
        "arguments_hash": edit.new_hash,
        "counts_as_approval": True,
    }
    if isinstance(action, VoteStep):
        data["step_id"] = str(action.step_id)
    if request.voters:
        data["dismissed_approvals"] = sorted(str(v) for v in request.voters)
    if isinstance(action, VoteStep):
        if stood_in := _on_behalf_of(request, action):
            data["on_behalf_of"] = str(stood_in)
        if dismissed := dismissed_step_votes(request):
            data["dismissed_votes"] = dismissed
        if transition.step_count is not None:
            data["step_current_approvals"] = transition.step_count[1]
    approved_before = {s.id for s in request.steps if s.status == "approved"}
    reopened = [
        str(sid)
        for sid, status in transition.step_changes
        if status == "pending" and sid in approved_before
    ]
    if reopened:
        data["reopened_steps"] = reopened
    return WriteEvent("arguments.edited", data)


def _expire(request: RequestView, now: datetime) -> Transition:
    if request.status != "pending":
        raise RequestNotPending(request.status)
    if not is_past_expiry(request.expires_at, now):
        raise Conflict("The request has not reached its expiry time.")
    return Transition("expired", request.current_approvals, "request.expired")


def _count_based_vote(request: RequestView, action: Decide) -> Transition:
    if action.actor.user_id in request.voters:
        raise AlreadyVoted()
    if action.decision == "reject":
        return Transition("rejected", request.current_approvals, "request.rejected", True)
    approvals = request.current_approvals + 1
    if approvals >= request.required_approvals:
        return Transition("approved", approvals, "request.approved", records_vote=True)
    return Transition("pending", approvals, "request.vote_recorded", records_vote=True)


def _skip_pending(request: RequestView, *, except_step: uuid.UUID | None = None) -> StepChanges:
    return tuple(
        (s.id, "skipped") for s in request.steps if s.status == "pending" and s.id != except_step
    )


def _override(request: RequestView, decision: Decision) -> Transition:
    skipped = _skip_pending(request)
    status: RequestStatus = "approved" if decision == "approve" else "rejected"
    event: EventType = "request.approved" if decision == "approve" else "request.rejected"
    return Transition(
        status, request.current_approvals, event, step_changes=skipped, is_override=True
    )


def _step_vote(request: RequestView, action: VoteStep) -> Transition:
    step = _find_step(request, action.step_id)
    if step.status != "pending":
        raise StepNotPending(step.status)
    if request.is_sequential and any(
        s.step_order < step.step_order and s.status != "approved" for s in request.steps
    ):
        raise StepOutOfOrder()
    if step.group_id is not None and action.actor.user_id in step.voters:
        raise AlreadyVoted("You have already voted on this step.")
    if step.group_id is not None and (stood_in := _on_behalf_of(request, action)) in step.voters:
        raise AlreadyVoted(
            "The member you stand in for has already voted on this step.",
            {"on_behalf_of": str(stood_in)},
        )
    if action.decision == "reject":
        skipped = _skip_pending(request, except_step=step.id)
        return Transition(
            "rejected",
            request.current_approvals,
            "request.rejected",
            step_changes=((step.id, "rejected"), *skipped),
        )
    if step.group_id is not None and step.current_approvals + 1 < step.required_approvals:
        # One more member approved the group's step; its quorum is not reached yet.
        count = (step.id, step.current_approvals + 1)
        return Transition(
            "pending", request.current_approvals, "step.vote_recorded", step_count=count
        )
    counted = (step.id, step.current_approvals + 1) if step.group_id is not None else None
    approved = sum(1 for s in request.steps if s.status == "approved") + 1
    if approved == len(request.steps):
        return Transition(
            "approved",
            approved,
            "request.approved",
            step_changes=((step.id, "approved"),),
            step_count=counted,
        )
    return Transition(
        "pending",
        approved,
        "step.approved",
        step_changes=((step.id, "approved"),),
        step_count=counted,
    )


def _find_step(request: RequestView, step_id: uuid.UUID) -> StepView:
    for step in request.steps:
        if step.id == step_id:
            return step
    raise NotFound("No such step on this request.")
