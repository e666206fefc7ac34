"""Use cases of approval requests. Services never commit: the caller's unit of work does.

Every status change goes through ``state.apply`` and then ``_record_transition``, the one
place that writes a transition's consequences (row, vote, audit event, and the outbox rows
that come with callbacks) in the caller's transaction.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import orjson

from signoff import metrics
from signoff.approvals import state
from signoff.approvals.listing import ListFilters, read_page
from signoff.approvals.repository import (
    ApprovalReads,
    ApprovalRepository,
    LockedRequest,
    NewEvent,
    NewVote,
    RequestRecord,
)
from signoff.approvals.schemas import CreateApprovalRequest, DecideApprovalRequest
from signoff.auth.principal import Principal
from signoff.common.ids import new_id
from signoff.common.poison import PoisonedRows
from signoff.common.time import utcnow
from signoff.crypto import SecretBox
from signoff.errors import Forbidden, NotFound, RequestNotPending, StepsLocked, ValidationFailed
from signoff.models import ApprovalRequest, ApprovalStep, AuditEvent, Comment, Vote
from signoff.webhooks import service as webhooks
from signoff.webhooks.repository import WebhookRepository

if TYPE_CHECKING:
    from signoff.unit_of_work import UnitOfWork


# No stored idempotency key is longer: the column's size, whatever the operator's limit.
MAX_STORED_KEY_LENGTH = 255


@dataclass(frozen=True)
class CreateResult:
    request: RequestRecord
    created: bool


@dataclass(frozen=True)
class TransitionResult:
    request: RequestRecord
    transition: state.Transition


async def create_request(
    repo: ApprovalRepository,
    principal: Principal,
    payload: CreateApprovalRequest,
    box: SecretBox,
    now: datetime,
) -> CreateResult:
    """Create a request, or return the org's earlier one with the same idempotency key."""
    values: dict[str, Any] = {
        "id": new_id(),
        "org_id": principal.org_id,
        "connection_id": principal.connection_id,
        "title": payload.title,
        "description": payload.description,
        "status": "pending",
        "priority": payload.priority,
        "action_type": payload.action_type,
        "source": payload.source,
        "metadata": payload.metadata or {},
        "callback_url": payload.callback_url,
        "callback_headers_encrypted": (
            box.encrypt(orjson.dumps(payload.callback_headers).decode())
            if payload.callback_headers
            else None
        ),
        "required_approvals": payload.required_approvals,
        "current_approvals": 0,
        "is_sequential": payload.is_sequential,
        "idempotency_key": payload.idempotency_key,
        "expires_at": payload.expires_at,
        "created_at": now,
        "updated_at": now,
        "comments_count": 0,
        "has_steps": False,
    }
    created = await repo.insert_unless_key_taken(values)
    if created is None:
        assert payload.idempotency_key is not None  # only a key can conflict
        existing = await repo.find_by_idempotency_key(principal.org_id, payload.idempotency_key)
        if existing is None:  # pragma: no cover - the conflicting row cannot vanish
            raise NotFound("The request holding this idempotency key no longer exists.")
        return CreateResult(existing, created=False)
    await repo.add_event(
        _event(
            created,
            "request.created",
            principal.user_id,
            now,
            {"title": created.title, "priority": created.priority, "source": created.source},
        )
    )
    return CreateResult(created, created=True)


async def find_replayed_request(
    repo: ApprovalRepository, principal: Principal, idempotency_key: object
) -> ApprovalRequest | None:
    """The org's request created under this idempotency key, if the key is one.

    Called with a body that failed validation, so the key itself is checked first: one
    that could never have been stored (too long, a NUL) is not looked up.
    """
    if not isinstance(idempotency_key, str) or not idempotency_key:
        return None
    if len(idempotency_key) > MAX_STORED_KEY_LENGTH or "\x00" in idempotency_key:
        return None
    return await repo.find_by_idempotency_key(principal.org_id, idempotency_key)


async def get_request(
    repo: ApprovalRepository | ApprovalReads, principal: Principal, request_id: uuid.UUID
) -> ApprovalRequest:
    row = await repo.get(principal.org_id, request_id)
    if row is None:
        raise NotFound("No approval request with this id.")
    return row


async def list_requests(
    reads: ApprovalReads,
    principal: Principal,
    filters: ListFilters,
    *,
    page: int,
    page_size: int,
    now: datetime,
) -> tuple[list[str], int]:
    """A page of the caller's org's requests as rendered JSON objects, and the total."""
    return await read_page(
        reads.queries,
        principal.org_id,
        filters,
        now=now,
        offset=(page - 1) * page_size,
        limit=page_size,
    )


async def decide(
    repo: ApprovalRepository,
    principal: Principal,
    request_id: uuid.UUID,
    payload: DecideApprovalRequest,
    now: datetime,
) -> TransitionResult:
    action = state.Decide(principal.actor, payload.decision)
    row, transition = await _vote(repo, principal, request_id, action, payload, now)
    return TransitionResult(row, transition)


async def _vote(
    repo: ApprovalRepository,
    principal: Principal,
    request_id: uuid.UUID,
    action: state.Decide | state.VoteStep,
    payload: DecideApprovalRequest,
    now: datetime,
) -> tuple[RequestRecord, state.Transition]:
    """A request-level decision or a step vote: lock, ask the state machine, record."""
    row = await _get_locked(repo, principal, request_id)
    transition = state.apply(await _view(repo, row), action, now)
    await _record_transition(
        repo,
        row,
        transition,
        principal,
        now,
        decision=payload.decision,
        comment=payload.comment,
        source=payload.source,
        step_id=action.step_id if isinstance(action, state.VoteStep) else None,
    )
    return row, transition


async def cancel(
    repo: ApprovalRepository, principal: Principal, request_id: uuid.UUID, now: datetime
) -> TransitionResult:
    return await _cancel(repo, principal.org_id, principal, request_id, now)


# Requests cancelled per transaction by the hard stop: each batch holds the writer (SQLite)
# or its rows' locks (PostgreSQL) for a bounded time, so other writers go on in between
# (docs/operations.md, *Emergency stop*).
CANCEL_BATCH_SIZE = 100


async def cancel_all_pending(
    transaction: Callable[[], AbstractAsyncContextManager[UnitOfWork]],
    org_id: uuid.UUID,
    principal: Principal | None,
    committed: Callable[[UnitOfWork, list[TransitionResult]], Awaitable[None]],
    *,
    poisoned: PoisonedRows | None = None,
    batch_size: int | None = None,
    clock: Callable[[], datetime] = utcnow,
) -> int:
    """The hard stop of ``emergency-stop on --cancel-pending``: cancel every pending request
    of the org, ``batch_size`` per transaction; answers how many were cancelled.

    The caller has committed the org's emergency stop first, so no request of the org is
    created or decided meanwhile. Each batch commits its cancellations with their
    callbacks (the outbox), then ``committed(uow, results)`` runs: the caller delivers or
    hands off that batch's callbacks. A crash part-way leaves the stop on and the rest
    still pending, visibly; running the stop again cancels the rest. Requests are listed
    again once the list is done, in case one was created just before the stop (a caller
    authenticated before it), until none is left that was not tried.

    ``principal`` is None when the operator's CLI does it: no user decided.
    """
    size = batch_size or CANCEL_BATCH_SIZE
    tried: set[uuid.UUID] = set()
    cancelled = 0
    while True:
        async with transaction() as uow:
            pending = [i for i in await uow.approvals.pending_ids(org_id) if i not in tried]
        if not pending:
            return cancelled
        for start in range(0, len(pending), size):
            batch = pending[start : start + size]
            tried.update(batch)
            async with transaction() as uow:
                results = await cancel_pending(
                    uow.approvals, org_id, principal, batch, clock(), poisoned
                )
            cancelled += len(results)
            await committed(uow, results)


async def cancel_pending(
    repo: ApprovalRepository,
    org_id: uuid.UUID,
    principal: Principal | None,
    request_ids: Sequence[uuid.UUID],
    now: datetime,
    poisoned: PoisonedRows | None = None,
) -> list[TransitionResult]:
    """Cancel those of ``request_ids`` still pending (one batch of the hard stop).

    Each in a savepoint of its own, as the sweep does: a request that cannot be cancelled
    is parked and the rest of the batch commits.
    """
    results = []
    for request_id in request_ids:
        try:
            async with repo.savepoint():
                results.append(await _cancel(repo, org_id, principal, request_id, now))
        except (RequestNotPending, NotFound):
            # Decided, cancelled or expired meanwhile (or past its deadline already: the
            # sweep expires it).
            continue
        except Exception as exc:  # one bad row must not keep the others from stopping
            (poisoned or PoisonedRows()).park(CANCEL_JOB, request_id, exc)
    return results


async def _cancel(
    repo: ApprovalRepository,
    org_id: uuid.UUID,
    principal: Principal | None,
    request_id: uuid.UUID,
    now: datetime,
) -> TransitionResult:
    row = await repo.get_locked(org_id, request_id)
    if row is None:
        raise NotFound("No approval request with this id.")
    actor = principal.actor if principal else None
    transition = state.apply(await _view(repo, row), state.Cancel(actor), now)
    await _record_transition(repo, row, transition, principal, now)
    return TransitionResult(row, transition)


EXPIRY_JOB = "expiry"
CANCEL_JOB = "emergency_stop"


async def expire_due(
    repo: ApprovalRepository, now: datetime, batch_size: int, poisoned: PoisonedRows
) -> list[TransitionResult]:
    """Mark pending requests past their deadline as expired (the sweep's one step).

    Each request is expired in a savepoint of its own: one that cannot be (say, its
    callback cannot be built) is rolled back alone and parked, and the rest commit.
    """
    results = []
    for row in await repo.due_for_expiry(now, batch_size, poisoned.parked(EXPIRY_JOB)):
        try:
            async with repo.savepoint():
                transition = state.apply(await _view(repo, row), state.Expire(), now)
                await _record_transition(repo, row, transition, None, now)
        except Exception as exc:  # one bad row must not hold every other org's expiries
            poisoned.park(EXPIRY_JOB, row.id, exc)
            continue
        results.append(TransitionResult(row, transition))
    return results


async def add_comment(
    repo: ApprovalRepository,
    principal: Principal,
    request_id: uuid.UUID,
    body: str,
    now: datetime,
) -> Comment:
    # Every writer of a request locks its row first, so two writers can never hold
    # weaker locks and wait for each other's upgrade (a deadlock on PostgreSQL).
    row = await _get_locked(repo, principal, request_id)
    comment = await _add_comment(repo, row, principal.user_id, body, now)
    await repo.flush()
    return comment


async def list_comments(
    repo: ApprovalRepository, principal: Principal, request_id: uuid.UUID
) -> Sequence[Comment]:
    await get_request(repo, principal, request_id)
    return await repo.list_comments(request_id)


async def list_events(
    repo: ApprovalRepository, principal: Principal, request_id: uuid.UUID
) -> Sequence[AuditEvent]:
    await get_request(repo, principal, request_id)
    return await repo.list_events(request_id)


# ---- approval chains (decisions.md section 2) ----


@dataclass(frozen=True)
class StepSpec:
    approver_id: uuid.UUID
    step_order: int


@dataclass(frozen=True)
class StepVoteResult:
    request: RequestRecord
    step: ApprovalStep
    transition: state.Transition


async def set_steps(
    repo: ApprovalRepository,
    principal: Principal,
    request_id: uuid.UUID,
    specs: Sequence[StepSpec],
    now: datetime,
) -> Sequence[ApprovalStep]:
    """Replace the request's chain: allowed while it is pending and nobody has voted.

    Only an admin, or the connection that created the request, may configure its chain;
    only an admin may make it need fewer approvals than it does now (decisions.md 2).
    """
    row = await _get_locked(repo, principal, request_id)
    _check_may_configure_steps(principal, row)
    status = state.effective_status(await _view(repo, row), now)
    if status != "pending":
        raise RequestNotPending(status)
    if await repo.has_votes(row.id):
        raise StepsLocked("Votes have been cast on this request; its chain can no longer change.")
    _check_keeps_the_bar(principal, row, len(specs))
    await _check_approvers(repo, principal.org_id, specs)
    steps = [
        ApprovalStep(
            id=new_id(),
            request_id=row.id,
            step_order=spec.step_order,
            approver_id=spec.approver_id,
            status="pending",
            created_at=now,
        )
        for spec in sorted(specs, key=lambda spec: spec.step_order)
    ]
    await repo.replace_steps(row.id, steps)
    # With steps, the request needs every step approved (decisions.md section 2).
    changes = {
        "required_approvals": len(steps),
        "current_approvals": 0,
        "has_steps": True,
        "updated_at": now,
    }
    await repo.update_if_pending(row.id, changes)
    repo.show_written(row, changes)
    await repo.add_event(
        _event(
            row,
            "steps.configured",
            principal.user_id,
            now,
            {
                "steps": [
                    {"step_order": s.step_order, "approver_id": str(s.approver_id)} for s in steps
                ]
            },
        )
    )
    await repo.flush()
    return steps


def _check_may_configure_steps(principal: Principal, row: RequestRecord) -> None:
    # An OAuth token acts as its user, not as the connection: only an admin's may.
    created_it = principal.auth_method == "api_key" and principal.connection_id == row.connection_id
    if not (principal.is_admin or created_it):
        raise Forbidden(
            "Only an admin, or the connection that created the request, may configure its steps."
        )


def _check_keeps_the_bar(principal: Principal, row: RequestRecord, step_count: int) -> None:
    if step_count < row.required_approvals and not principal.is_admin:
        raise ValidationFailed.for_field(
            "steps",
            f"the request needs {row.required_approvals} approvals; only an admin may "
            "configure fewer steps than that",
        )


async def _check_approvers(
    repo: ApprovalRepository, org_id: uuid.UUID, specs: Sequence[StepSpec]
) -> None:
    approvers = {spec.approver_id for spec in specs}
    if len(approvers) != len(specs):
        raise ValidationFailed.for_field(
            "steps", "each approver may hold one step only (nobody counts twice)"
        )
    known = await repo.org_user_ids(org_id, approvers)
    unknown = [
        {"field": f"steps.{index}.approver_id", "message": "is not a user of this organization"}
        for index, spec in enumerate(specs)
        if spec.approver_id not in known
    ]
    if unknown:
        raise ValidationFailed.for_fields(unknown)


async def list_steps(
    repo: ApprovalRepository, principal: Principal, request_id: uuid.UUID
) -> Sequence[ApprovalStep]:
    await get_request(repo, principal, request_id)
    return await repo.list_steps(request_id)


async def vote_step(
    repo: ApprovalRepository,
    principal: Principal,
    request_id: uuid.UUID,
    step_id: uuid.UUID,
    payload: DecideApprovalRequest,
    now: datetime,
) -> StepVoteResult:
    action = state.VoteStep(principal.actor, step_id, payload.decision)
    row, transition = await _vote(repo, principal, request_id, action, payload, now)
    step = await repo.get_step(row.id, step_id)
    assert step is not None  # the state machine found it in the locked chain
    return StepVoteResult(row, step, transition)


async def steps_and_votes(
    repo: ApprovalRepository | ApprovalReads, row: RequestRecord
) -> tuple[Sequence[ApprovalStep], Sequence[Vote]]:
    """What the single read shows beside the request: its chain and the votes cast.

    Each is queried only when the row says there can be any, to keep reads cheap.
    """
    steps = await repo.list_steps(row.id) if row.has_steps else ()
    may_have_votes = row.has_steps or row.current_approvals > 0 or row.decided_by is not None
    votes = await repo.list_votes(row.id) if may_have_votes else ()
    return steps, votes


# ---- internals ----


async def _get_locked(
    repo: ApprovalRepository, principal: Principal, request_id: uuid.UUID
) -> LockedRequest:
    row = await repo.get_locked(principal.org_id, request_id)
    if row is None:
        raise NotFound("No approval request with this id.")
    return row


async def _view(repo: ApprovalRepository, row: RequestRecord) -> state.RequestView:
    """The state machine's snapshot of a (locked) request: its votes and its chain."""
    steps = await repo.list_steps(row.id) if row.has_steps else ()
    count_based_pending = row.status == "pending" and not steps
    return state.RequestView(
        status=row.status,  # type: ignore[arg-type]
        required_approvals=row.required_approvals,
        current_approvals=row.current_approvals,
        expires_at=row.expires_at,
        is_sequential=row.is_sequential,
        voters=await repo.count_based_voters(row.id) if count_based_pending else frozenset(),
        steps=tuple(state.StepView(s.id, s.step_order, s.approver_id, s.status) for s in steps),
    )


async def _record_transition(
    repo: ApprovalRepository,
    row: RequestRecord,
    transition: state.Transition,
    principal: Principal | None,
    now: datetime,
    *,
    decision: str | None = None,
    comment: str | None = None,
    source: str | None = None,
    step_id: uuid.UUID | None = None,
) -> None:
    """Write everything a transition implies, in the caller's transaction."""
    actor_id = principal.user_id if principal else None
    values: dict[str, Any] = {
        "status": transition.status,
        "current_approvals": transition.current_approvals,
        "updated_at": now,
    }
    if transition.is_final:
        values.update(_final_fields(transition, principal, now, row, comment))
    if not await repo.update_if_pending(row.id, values):
        # The row lock (PostgreSQL) or the write lock (SQLite) makes this unreachable;
        # should it ever happen, refusing is right and nothing has been written.
        raise RequestNotPending(row.status)
    if transition.is_final:
        metrics.count_decision(transition.status)
    repo.show_written(row, values)
    if principal is not None and decision is not None and (transition.records_vote or step_id):
        await repo.add_vote(
            NewVote(
                request_id=row.id,
                step_id=step_id,
                user_id=principal.user_id,
                decision=decision,
                comment=comment,
                created_at=now,
            )
        )
    for changed_step_id, step_status in transition.step_changes:
        voted = changed_step_id == step_id
        await repo.update_step(
            changed_step_id,
            status=step_status,
            decided_at=now,
            decided_by=actor_id if voted else None,
            comment=comment if voted else None,
        )
    if comment and principal is not None:
        await _add_comment(repo, row, principal.user_id, comment, now)
    data: dict[str, Any] = {
        "status": transition.status,
        "current_approvals": transition.current_approvals,
        "required_approvals": row.required_approvals,
    }
    if decision:
        data["decision"] = decision
    if comment:
        data["comment"] = comment
    if source:
        data["source"] = source
    if transition.is_override:
        data["override"] = True
        data["skipped_steps"] = [str(sid) for sid, _ in transition.step_changes]
    if step_id is not None:
        step_data = {
            **data,
            "step_id": str(step_id),
            "step_status": dict(transition.step_changes)[step_id],
        }
        await repo.add_event(
            _event(row, f"step.{step_data['step_status']}", actor_id, now, step_data)
        )
    if transition.event != "step.approved":
        await repo.add_event(_event(row, transition.event, actor_id, now, data))
    await _enqueue_callback(repo, row, transition, principal, comment, now)
    await repo.flush()


async def _enqueue_callback(
    repo: ApprovalRepository,
    row: RequestRecord,
    transition: state.Transition,
    principal: Principal | None,
    comment: str | None,
    now: datetime,
) -> None:
    """The outbox row commits with the decision: an acknowledged decision always has its
    callback (decisions.md section 9). The caller makes attempt 1 after the commit."""
    if transition.is_final and row.callback_url:
        await webhooks.enqueue_decision_callback(
            WebhookRepository(repo.session, repo.dialect), row, principal, comment, now
        )


def _final_fields(
    transition: state.Transition,
    principal: Principal | None,
    now: datetime,
    row: RequestRecord,
    comment: str | None,
) -> dict[str, Any]:
    if transition.status == "expired":
        # Expiry happened at the deadline, whenever the sweep notices it.
        return {"decided_at": row.expires_at or now}
    fields: dict[str, Any] = {
        "decided_at": now,
        "decided_by": principal.user_id if principal else None,
        "decided_by_name": principal.user_name if principal else None,
        "decision_comment": comment,
    }
    if transition.status == "cancelled":
        fields["cancelled_at"] = now
    return fields


async def _add_comment(
    repo: ApprovalRepository, row: RequestRecord, user_id: uuid.UUID, body: str, now: datetime
) -> Comment:
    comment = Comment(
        id=new_id(),
        org_id=row.org_id,
        request_id=row.id,
        user_id=user_id,
        body=body,
        created_at=now,
    )
    await repo.add_comment(comment)
    repo.show_written(row, {"comments_count": row.comments_count + 1})
    await repo.add_event(
        _event(row, "comment.created", user_id, now, {"comment_id": str(comment.id), "body": body})
    )
    return comment


def _event(
    row: RequestRecord,
    event_type: str,
    actor_id: uuid.UUID | None,
    now: datetime,
    data: dict[str, Any],
) -> NewEvent:
    return NewEvent(
        org_id=row.org_id,
        request_id=row.id,
        type=event_type,
        actor_id=actor_id,
        data=data,
        created_at=now,
    )
