"""The one gate for status changes of an approval request.

``apply(request, action, now)`` is a pure function: it sees a snapshot of the request (its
votes and steps included), an action and the clock, and answers with the ``Transition`` to
make or raises the typed refusal (an ``AppError``) the caller must get. It does no I/O, so
every (status, action) pair is tested exhaustively in milliseconds; the service applies
the transition to the database and dispatches its side effects in one place.

Rules (decisions.md sections 2 and 3):
- Only a pending request changes; approved, rejected, cancelled and expired are final.
- A pending request past ``expires_at`` *is* expired for every read and write, whether or
  not the sweep has marked it yet.
- Count-based (no steps): each approve by a distinct user counts; at ``required_approvals``
  the request is approved. One reject rejects. A user votes once.
- Steps: a step approve approves that step, and the request once every step is approved;
  a step reject rejects the request and skips the remaining steps. Sequential chains are
  voted in order. Only a step's approver or an admin may vote it; only an admin may decide
  a request with steps directly (an override that skips the pending steps).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from signoff.errors import (
    AlreadyVoted,
    Conflict,
    Forbidden,
    NotFound,
    RequestNotPending,
    StepNotPending,
    StepOutOfOrder,
)

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
class Actor:
    user_id: uuid.UUID
    is_admin: bool = False


@dataclass(frozen=True)
class StepView:
    id: uuid.UUID
    step_order: int
    approver_id: uuid.UUID
    status: StepStatus


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


@dataclass(frozen=True)
class Decide:
    """A request-level approve or reject (``PATCH /approvals/:id``)."""

    actor: Actor
    decision: Decision


@dataclass(frozen=True)
class VoteStep:
    actor: Actor
    step_id: uuid.UUID
    decision: Decision


@dataclass(frozen=True)
class Cancel:
    actor: Actor | None  # None: the operator, acting for no user


@dataclass(frozen=True)
class Expire:
    """The clock passed ``expires_at``; applied by the sweep (or lazily by a write)."""


Action = Decide | VoteStep | Cancel | Expire

# What the audit trail records for a transition; see ``Transition.event``.
EventType = Literal[
    "request.vote_recorded",
    "request.approved",
    "request.rejected",
    "request.cancelled",
    "request.expired",
    "step.approved",
]


StepChanges = tuple[tuple[uuid.UUID, StepStatus], ...]


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

    @property
    def is_final(self) -> bool:
        return self.status in TERMINAL_STATUSES


def effective_status(request: RequestView, now: datetime) -> RequestStatus:
    if request.status == "pending" and is_past_expiry(request.expires_at, now):
        return "expired"
    return request.status


def is_past_expiry(expires_at: datetime | None, now: datetime) -> bool:
    return expires_at is not None and now >= expires_at


def apply(request: RequestView, action: Action, now: datetime) -> Transition:
    """The transition ``action`` makes on ``request`` at ``now``, or raise its refusal."""
    if isinstance(action, Expire):
        return _expire(request, now)
    if isinstance(action, VoteStep):
        # Who may vote is checked before the request's state, so the answer to a stranger
        # does not depend on what happened to the request.
        step = _find_step(request, action.step_id)
        if step.approver_id != action.actor.user_id and not action.actor.is_admin:
            raise Forbidden("Only the step's approver or an admin may vote on this step.")
    if isinstance(action, Decide) and request.steps and not action.actor.is_admin:
        raise Forbidden(
            "This request has approval steps: vote on your step, or ask an admin to override."
        )
    status = effective_status(request, now)
    if status != "pending":
        raise RequestNotPending(status)
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
    if action.decision == "reject":
        skipped = _skip_pending(request, except_step=step.id)
        return Transition(
            "rejected",
            request.current_approvals,
            "request.rejected",
            step_changes=((step.id, "rejected"), *skipped),
        )
    approved = sum(1 for s in request.steps if s.status == "approved") + 1
    if approved == len(request.steps):
        return Transition(
            "approved", approved, "request.approved", step_changes=((step.id, "approved"),)
        )
    return Transition("pending", approved, "step.approved", step_changes=((step.id, "approved"),))


def _find_step(request: RequestView, step_id: uuid.UUID) -> StepView:
    for step in request.steps:
        if step.id == step_id:
            return step
    raise NotFound("No such step on this request.")
