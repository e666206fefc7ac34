"""Use cases of approval requests. Services never commit: the caller's unit of work does.

Every status change locks the request, asks ``state.apply`` for the transition, and hands
it to ``effects.apply_transition``, the one place that writes what a transition causes
(row, vote, steps, comment, audit events, the callback's outbox row, live-update signals)
in the caller's transaction.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Awaitable, Callable, Collection, Mapping, MutableSequence, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Literal, Protocol, TypeVar, cast

import orjson

from signoff.approvals import effects, state
from signoff.approvals.listing import ListFilters, read_page
from signoff.approvals.previews import preview_hash
from signoff.approvals.repository import (
    ApprovalReads,
    ApprovalRepository,
    StandingUse,
    StandingUseLost,
)
from signoff.approvals.schemas import (
    CreateApprovalRequest,
    DecideApprovalRequest,
    RelayedDecision,
)
from signoff.approvals.typed_rows import RequestRecord, StepRecord, VoteRecord
from signoff.auth.authority import check_own_request
from signoff.auth.principal import OrgMember, Principal, PrincipalCheck
from signoff.common.ids import new_id
from signoff.common.poison import PoisonedRows
from signoff.common.time import utcnow
from signoff.crypto import SecretBox
from signoff.errors import (
    AppError,
    NotFound,
    PasskeyRequired,
    RequestNotPending,
    SelfApprovalForbidden,
    ValidationFailed,
)
from signoff.models import AuditEvent, Comment
from signoff.models.approvals import DEFAULT_RECEIPT_TTL_SECONDS
from signoff.passkeys.rule import PasskeyProof, passkey_may_be_needed, passkey_needed
from signoff.policies import service as policies
from signoff.policies import standing
from signoff.policies.evaluator import RequestFacts
from signoff.policies.repository import PolicyRepository
from signoff.policies.schemas import StandingGrantIn
from signoff.policies.standing_repository import StandingApprovalRepository
from signoff.receipts.arguments import arguments_hash
from signoff.storage import LostRace, channel_presence
from signoff.webhooks.service import CIBA_SOURCE


class HeldCallbacks(Protocol):
    """The callbacks a transaction wrote, held by it until it commits."""

    @property
    def claimed(self) -> MutableSequence[Any]: ...


class ApprovalsWork(effects.EffectsUnitOfWork, Protocol):
    """What this module's use cases need of a unit of work: the approvals repository,
    what ``effects.py`` writes through, and what a change that is undone takes back (the
    callbacks it held and the changes it announced)."""

    @property
    def approvals(self) -> ApprovalRepository: ...

    @property
    def policies(self) -> PolicyRepository: ...

    @property
    def standing(self) -> StandingApprovalRepository: ...

    @property
    def outbox(self) -> HeldCallbacks: ...

    @property
    def changes(self) -> MutableSequence[Any]: ...


Work = TypeVar("Work", bound=ApprovalsWork)


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
    # A step vote's step, as written.
    step: StepRecord | None = None


def check_api_source(payload: CreateApprovalRequest) -> None:
    """A create through the API may not claim the source signoff reserves for the
    requests its OpenID CIBA endpoint makes (``CIBA_SOURCE``): that source is what makes
    a decision's callback a CIBA ping and withholds the receipt from it."""
    if payload.source == CIBA_SOURCE:
        raise ValidationFailed.for_field(
            "source", f"'{CIBA_SOURCE}' is reserved for /oauth/bc-authorize"
        )


async def create_request(
    uow: ApprovalsWork,
    principal: Principal,
    payload: CreateApprovalRequest,
    box: SecretBox,
    now: datetime,
    check: PrincipalCheck | None = None,
) -> CreateResult:
    """Create a request, or return the org's earlier one with the same idempotency key.

    The state machine answers what a create causes (``state.Create``) and
    ``effects.apply_create`` writes it. Columns not named here take the table's defaults
    (``typed_rows.new_row``). ``check``: the principal came from memory; the insert confirms
    it (``PrincipalCheck``)."""
    values: dict[str, Any] = {
        "id": new_id(),
        "org_id": principal.org_id,
        "connection_id": principal.connection_id,
        "title": payload.title,
        "description": payload.description,
        "priority": payload.priority,
        "action_type": payload.action_type,
        "source": payload.source,
        "metadata": payload.metadata or {},
        **_preview_columns(payload),
        "callback_url": payload.callback_url,
        "callback_headers_encrypted": (
            box.encrypt(orjson.dumps(payload.callback_headers).decode())
            if payload.callback_headers
            else None
        ),
        "required_approvals": payload.required_approvals,
        "is_sequential": payload.is_sequential,
        "idempotency_key": payload.idempotency_key,
        "expires_at": payload.expires_at,
        "arguments": payload.arguments,
        "arguments_schema": payload.arguments_schema,
        "arguments_hash": arguments_hash(payload.arguments),
        "receipt_ttl_seconds": payload.receipt_ttl_seconds or DEFAULT_RECEIPT_TTL_SECONDS,
        "created_at": now,
        "updated_at": now,
    }
    verdict = await policies.verdict_for_create(
        uow.policies, principal, _policy_facts(principal, payload), now
    )
    values.update(verdict.changes)
    matched = await _standing_match(uow, principal, payload, verdict, values, now)
    try:
        created, taken = await _write_create(
            uow, principal, payload, verdict, values, matched, now, check
        )
    except StandingUseLost:
        # PostgreSQL: its use was taken by concurrent creates first; nothing was written.
        # The candidates are read again in this transaction, each use an UPDATE of its
        # own (``standing.match``, ``taking``), as before the use went into the insert.
        matched = await _standing_match(uow, principal, payload, verdict, values, now, True)
        created, taken = await _write_create(
            uow, principal, payload, verdict, values, matched, now, check
        )
    if created is None:
        assert payload.idempotency_key is not None  # only a key can conflict
        if matched is not None and taken:  # a replay approves nothing: the use goes back
            await uow.standing.give_back(matched.row.id)
        existing = await uow.approvals.find_by_idempotency_key(
            principal.org_id, payload.idempotency_key
        )
        if existing is None:  # pragma: no cover - the conflicting row cannot vanish
            raise NotFound("The request holding this idempotency key no longer exists.")
        return CreateResult(existing, created=False)
    if verdict.group_steps and created.status == "pending":
        # A ``require`` rule naming groups: the chain the org's admin wrote in the policy.
        specs = [
            StepSpec(None, order, group_id, count)
            for order, (group_id, count) in enumerate(verdict.group_steps, 1)
        ]
        await set_steps(uow, principal, created.id, specs, now, check, by_policy=True)
        created = await uow.approvals.get(principal.org_id, created.id) or created
    return CreateResult(created, created=True)


async def _write_create(
    uow: ApprovalsWork,
    principal: Principal,
    payload: CreateApprovalRequest,
    verdict: policies.CreateVerdict,
    values: dict[str, Any],
    matched: standing.Match | None,
    now: datetime,
    check: PrincipalCheck | None,
) -> tuple[RequestRecord | None, bool]:
    """Write the create as the policies' ``verdict`` and the standing approval
    ``matched`` decide it (``effects.apply_create``): the request (None: its idempotency
    key was taken), and whether a use of ``matched`` was taken all the same, to give
    back (PostgreSQL: an UPDATE of its own, or the create's statement when a concurrent
    create with the key won the insert; SQLite's trigger takes none then). Raises
    ``StandingUseLost`` where the create's statement was to take the use and could not
    (``Match.by_create``), having written nothing."""
    row = dict(values)
    if matched is not None:
        verdict = replace(verdict, decision="approve", label=matched.label, data=matched.data)
        row["standing_approval_id"] = matched.row.id
    row.update(_decided_columns(verdict, now))
    action = state.Create(
        principal.actor,
        payload.title,
        row["priority"],
        payload.source,
        policy=_policy_verdict(verdict, "standing_approval" if matched else "policy"),
        has_callback=payload.callback_url is not None,
        notes=verdict.notes,
    )
    transition = state.apply(None, action, now)
    author = effects.Author(principal.user_id, principal.user_email, principal.user_name)
    use = StandingUse(matched.row.id, now) if matched is not None and matched.by_create else None
    created = await effects.apply_create(
        uow, row, transition, author, now, check, plan=_may_notify(principal), standing=use
    )
    if use is not None:
        return created, use.uses is not None
    return created, matched is not None and not uow.standing.use_taken_by_insert


def _may_notify(principal: Principal) -> bool:
    """False only where the principal says the org has no channel and nothing may have
    added one since it was read (``storage.channel_presence``, SQLite): then a "created"
    plan row would not be written anyway."""
    return principal.org_has_channels or not channel_presence.unchanged_since(
        principal.channels_epoch
    )


async def _standing_match(
    uow: ApprovalsWork,
    principal: Principal,
    payload: CreateApprovalRequest,
    verdict: policies.CreateVerdict,
    values: Mapping[str, Any],
    now: datetime,
    taking: bool = False,
) -> standing.Match | None:
    """After the policies (no rule decided), before people: the standing approval that
    approves the new request, its use taken in the create's transaction. Nothing is read
    in an org that never granted one (the principal says so), or for a request none may
    approve (critical, needing more than one approval)."""
    if verdict.decision is not None or payload.action_type is None:
        return None
    if not standing.may_match(
        principal.org_standing_approvals,
        values["priority"],
        values["required_approvals"],
        payload.action_type,
    ):
        return None
    return await standing.match(
        uow.standing,
        principal.org_id,
        principal.connection_id,
        payload.action_type,
        payload.arguments,
        now,
        taking=taking,
    )


def _policy_facts(principal: Principal, payload: CreateApprovalRequest) -> RequestFacts:
    """What the org's policy conditions may read of the new request."""
    return RequestFacts(
        action_type=payload.action_type,
        source=payload.source,
        priority=payload.priority,
        title=payload.title,
        metadata=payload.metadata or {},
        arguments=payload.arguments or {},
        connection_id=principal.connection_id,
        connection_name=principal.connection_name,
    )


def _policy_verdict(
    verdict: policies.CreateVerdict, by: Literal["policy", "standing_approval"]
) -> state.PolicyVerdict | None:
    if verdict.decision not in ("approve", "reject"):
        return None
    decision: state.Decision = "approve" if verdict.decision == "approve" else "reject"
    return state.PolicyVerdict(decision, verdict.data, verdict.reason, by)


def _decided_columns(verdict: policies.CreateVerdict, now: datetime) -> dict[str, Any]:
    """A request a policy (or a standing approval) decided is written decided: by no
    user, the policy and its version (or the standing approval and its grantor) named in
    ``decided_by_name``."""
    if verdict.decision is None:
        return {}
    approved = verdict.decision == "approve"
    return {
        "status": "approved" if approved else "rejected",
        "auto_approved": approved,
        "decided_at": now,
        "decided_by": None,
        "decided_by_name": verdict.label,
        "decision_comment": verdict.reason,
    }


def _preview_columns(payload: CreateApprovalRequest) -> dict[str, Any]:
    if payload.preview is None:
        return {}
    preview = {"kind": payload.preview.kind, "content": payload.preview.content}
    return {"preview": preview, "preview_hash": preview_hash(preview)}


async def find_replayed_request(
    repo: ApprovalRepository, principal: Principal, idempotency_key: object
) -> RequestRecord | None:
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
    repo: ApprovalRepository | ApprovalReads,
    principal: OrgMember,
    request_id: uuid.UUID,
    check: PrincipalCheck | None = None,
) -> RequestRecord:
    row = await repo.get(principal.org_id, request_id, check)
    if row is None:
        raise NotFound("No approval request with this id.")
    return row


async def action_types_in_use(repo: ApprovalRepository, principal: Principal) -> list[str]:
    """The action types the caller's org has used, for pickers and filters."""
    return list(await repo.action_types_in_use(principal.org_id))


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


# What a decision is cast on: the request itself (count-based, or an admin's override of
# a chain), one step of its chain (by its id), or the step awaiting the deciding person if
# the chain has one, else the request itself.
DecisionTarget = uuid.UUID | Literal["request", "my_step"]


async def decide(
    uow: ApprovalsWork,
    principal: OrgMember,
    request_id: uuid.UUID,
    payload: DecideApprovalRequest,
    now: datetime,
    check: PrincipalCheck | None = None,
    *,
    on: DecisionTarget = "request",
    passkey: PasskeyProof | None = None,
) -> TransitionResult:
    """An approve or reject, however it is made: ``PATCH /approvals/:id`` decides the
    request, ``PATCH .../steps/:id`` votes that step, and a person deciding from the
    dashboard, a mail link or Slack votes ``"my_step"``. ``check``: the principal came
    from memory; the first read confirms it (``PrincipalCheck``).

    ``passkey``: the proof that the person's passkey signed this very decision, which
    the org's ``passkey_for`` may require (else 403 PASSKEY_REQUIRED).

    ``payload.standing``: the approval also grants a standing approval, checked before
    anything is written and stored in the decision's transaction (which then takes the
    request's lock: the decision and the grant commit together or not at all)."""
    if passkey_may_be_needed(principal.org_passkey_for, principal.org_policy_version):
        await _check_passkey(uow.approvals, principal, request_id, payload, passkey, check)
    if principal.forbids_self_approval:
        await refuse_self_approval(uow.approvals, principal, request_id)
    grant = payload.standing
    if grant is not None:
        await _check_standing_grant(uow, principal, request_id, payload, grant, check)
    result = await _decide_on(uow, principal, request_id, payload, now, check, on)
    if grant is not None:
        if result.request.status != "approved":  # pragma: no cover - one approval decides
            raise ValidationFailed.for_field("standing", "only an approval that decides")
        await standing.grant(uow.standing, principal, grant, result.request, now)
    return result


async def _check_standing_grant(
    uow: ApprovalsWork,
    principal: OrgMember,
    request_id: uuid.UUID,
    payload: DecideApprovalRequest,
    grant: StandingGrantIn,
    check: PrincipalCheck | None,
) -> None:
    """Refuse a grant the request or the org's caps do not allow, before the decision;
    the request is read locked, so the decision is made under the lock too."""
    row = await _get_locked(uow.approvals, principal, request_id, check)
    caps = standing.caps_of(await uow.standing.caps(principal.org_id))
    arguments = payload.arguments if payload.arguments is not None else row.arguments
    standing.check_grant(grant, row, arguments, caps)


async def _decide_on(
    uow: ApprovalsWork,
    principal: OrgMember,
    request_id: uuid.UUID,
    payload: DecideApprovalRequest,
    now: datetime,
    check: PrincipalCheck | None,
    on: DecisionTarget,
) -> TransitionResult:
    # Out of office: a delegate votes the steps of those they stand in for. A vote on a
    # step named by id reads them once its step is known (``_vote_step``).
    stands_in_for: dict[uuid.UUID, str] | None = None
    if on == "my_step":
        stands_in_for = await uow.approvals.stood_in_for(principal.org_id, principal.user_id, now)
        on = await _step_awaiting(uow.approvals, principal, request_id, stands_in_for) or "request"
    if isinstance(on, uuid.UUID):
        return await _vote_step(uow, principal, request_id, on, payload, now, check, stands_in_for)
    return await _decide_request(uow, principal, request_id, payload, now, check)


async def _check_passkey(
    repo: ApprovalRepository,
    principal: OrgMember,
    request_id: uuid.UUID,
    payload: DecideApprovalRequest,
    passkey: PasskeyProof | None,
    check: PrincipalCheck | None,
) -> None:
    """Refuse a decision the org or a policy rule wants signed by a passkey unless this
    one was: read only when the org's setting is on or it has a policy, so other orgs
    pay nothing for it."""
    row = await get_request(repo, principal, request_id, check)
    if not passkey_needed(principal.org_passkey_for, row.priority, row.passkey_required):
        return
    if passkey is None or not passkey.covers(row.id, principal.user_id, payload.decision):
        raise PasskeyRequired(str(row.id))


async def refuse_self_approval(
    repo: ApprovalRepository, member: OrgMember, request_id: uuid.UUID
) -> None:
    """Four-eyes (the org's ``self_approval: forbid``): whoever owns the requesting
    connection, or acts through its API key, decides nothing on its requests. Every
    human decision passes here (API, dashboard, mail links, Slack); policies and
    standing approvals do not, since no person decides there."""
    if is_self_approval(member, await repo.requester(member.org_id, request_id)):
        raise SelfApprovalForbidden(
            details={"request_id": str(request_id), "user_id": str(member.user_id)}
        )


def is_self_approval(member: OrgMember, requester: tuple[uuid.UUID, uuid.UUID] | None) -> bool:
    """Whether ``member`` is the requester (``requester``: the request's connection and
    its owner) in the sense four-eyes forbids; always False while the org allows it."""
    if requester is None or not member.forbids_self_approval:
        return False
    connection_id, owner_id = requester
    return member.user_id == owner_id or member.actor.connection_id == connection_id


async def _step_awaiting(
    repo: ApprovalRepository,
    member: OrgMember,
    request_id: uuid.UUID,
    stands_in_for: Collection[uuid.UUID] = (),
) -> uuid.UUID | None:
    """The step of the request's chain that awaits ``member``'s vote, if any: their own
    first, else one of someone they stand in for."""
    row = await get_request(repo, member, request_id)
    if not row.has_steps:
        return None
    steps = await repo.list_steps(row.id)
    votes = await repo.list_votes(row.id) if any(s.group_id for s in steps) else ()
    groups = await groups_voting(repo, member, steps, votes, stands_in_for)
    step = votable_step(steps, member.user_id, row.is_sequential, stands_in_for, groups)
    return step.id if step is not None else None


async def groups_voting(
    repo: ApprovalRepository,
    member: OrgMember,
    steps: Sequence[StepRecord],
    votes: Sequence[VoteRecord],
    stands_in_for: Collection[uuid.UUID] = (),
) -> frozenset[uuid.UUID]:
    """The groups of the chain's pending group steps ``member`` may still vote for (no
    read for a chain of people): one who has not voted that step and is an active member
    of the group, or stands in for one (out of office) whose vote is not cast yet."""
    voted = {v.step_id for v in votes if member.user_id in (v.user_id, v.on_behalf_of)}
    counted: dict[uuid.UUID, set[uuid.UUID]] = {}
    for vote in votes:
        if vote.step_id is not None:
            counted.setdefault(vote.step_id, set()).add(vote.on_behalf_of or vote.user_id)
    pending = [
        s for s in steps if s.group_id is not None and s.status == "pending" and s.id not in voted
    ]
    if not pending:
        return frozenset()
    members = await repo.active_members(member.org_id, {s.group_id for s in pending if s.group_id})
    stood_in = set(stands_in_for)

    def may_vote(step: StepRecord) -> bool:
        assert step.group_id is not None
        people = members.get(step.group_id, frozenset())
        if member.user_id in people:
            return True
        return bool((people & stood_in) - counted.get(step.id, set()))

    return frozenset(s.group_id for s in pending if s.group_id is not None and may_vote(s))


async def group_vote_counts_for(
    repo: ApprovalRepository,
    member: OrgMember,
    step: StepRecord | None,
    votes: Sequence[VoteRecord],
    stands_in_for: Collection[uuid.UUID],
) -> uuid.UUID | None:
    """The away member ``member``'s vote on ``step`` would count for, as the state machine
    picks it (``state.group_stand_in``); None for their own vote or a person's step (no
    read unless they stand in for someone)."""
    if step is None or step.group_id is None or not stands_in_for:
        return None
    members = (await repo.active_members(member.org_id, {step.group_id})).get(step.group_id)
    counted = {v.on_behalf_of or v.user_id for v in votes if v.step_id == step.id}
    return state.group_stand_in(members or (), counted, member.user_id, stands_in_for)


def votable_step(
    steps: Sequence[StepRecord],
    user_id: uuid.UUID,
    sequential: bool,
    stands_in_for: Collection[uuid.UUID] = (),
    groups: Collection[uuid.UUID] = (),
) -> StepRecord | None:
    """The pending step of ``steps`` assigned to ``user_id`` or to one of ``groups``
    (``groups_voting``), else to someone they stand in for, that may be voted now (a
    sequential chain's earlier steps all approved)."""
    own = _votable_of(steps, {user_id, *groups}, sequential)
    return own or (_votable_of(steps, set(stands_in_for), sequential) if stands_in_for else None)


def _votable_of(
    steps: Sequence[StepRecord], approvers: set[uuid.UUID], sequential: bool
) -> StepRecord | None:
    for step in steps:
        decider = step.approver_id or step.group_id
        if decider in approvers and step.status == "pending":
            earlier = [s for s in steps if s.step_order < step.step_order]
            if not sequential or all(s.status == "approved" for s in earlier):
                return step
    return None


async def _decide_request(
    uow: ApprovalsWork,
    principal: OrgMember,
    request_id: uuid.UUID,
    payload: DecideApprovalRequest,
    now: datetime,
    check: PrincipalCheck | None = None,
) -> TransitionResult:
    action = state.Decide(
        principal.actor,
        payload.decision,
        payload.comment,
        payload.source,
        _via(payload),
        payload.arguments,
    )
    if uow.approvals.can_decide_without_lock:
        done = await _without_lock(uow, principal, request_id, action, now, check)
        if done is not None:
            return done[0]
    elif uow.approvals.can_decide_unread and check is None:
        decided = await _decided_unread(uow, principal, request_id, action, now)
        if decided is not None:
            return decided
    row = await _get_locked(uow.approvals, principal, request_id, check)
    return await _transition(uow, row, action, principal, now)


async def _decided_unread(
    uow: ApprovalsWork,
    principal: OrgMember,
    request_id: uuid.UUID,
    action: state.Decide,
    now: datetime,
) -> TransitionResult | None:
    """SQLite: the decision written before its request is read, in one compare-and-set
    that answers the row (``state.UnreadDecision``), then the state machine's answer on
    the request as it was, whose other effects are written as ever. None, having written
    nothing, when the condition does not hold (no such request, decided, expired, a
    chain, votes counted already...): the request is then read and decided under the
    lock, which gives the state machine's answer, refusal or transition."""
    unread = state.decided_unread(action)
    if unread is None:
        return None
    author = author_of(principal)
    values = effects.unread_values(unread, action.comment, author, now)
    written = await uow.approvals.decide_unread(principal.org_id, request_id, unread, values, now)
    if written is None:
        return None
    # The request as the condition says it was: pending, no approval counted, so no
    # voters, no chain, and nothing decided yet.
    before = written._replace(
        status=unread.status_before,
        current_approvals=unread.approvals_before,
        decided_at=None,
        decided_by=None,
        decided_by_name=None,
        decision_comment=None,
    )
    transition = state.apply(_view_of(before, (), frozenset()), action, now)
    row = await effects.apply_transition(uow, before, transition, author, now, written=written)
    return TransitionResult(row, transition)


# Reads of a request a transition without a lock makes before it takes the lock instead:
# each further one follows a change by someone else that landed between its read and
# its write, so the lock then costs less than reading again.
UNLOCKED_ATTEMPTS = 3


# A step vote's action, made once its chain is read (``_vote_step``): whom the voter
# stands in for is read only when the step is not their own.
ActionOn = Callable[[state.RequestView], Awaitable[tuple[state.VoteStep, effects.Author | None]]]


async def _without_lock(
    uow: ApprovalsWork,
    principal: OrgMember,
    request_id: uuid.UUID,
    action: state.Action | ActionOn,
    now: datetime,
    check: PrincipalCheck | None = None,
    before_writes: Callable[[ApprovalReads], Awaitable[None]] | None = None,
    author: effects.Author | None = None,
) -> tuple[TransitionResult, Sequence[StepRecord]] | None:
    """PostgreSQL: a transition (a decision, a step vote, a chain's first configuration)
    made without a lock, in a few round trips: the request read (in autocommit,
    confirming ``check``) with its chain if it has one, the state machine's answer, then
    every write in one statement that is its own transaction, made only if the request
    is still the version read (``ApprovalRepository.unless_changed``). A lost race is
    read again. Answers the result and the chain as read (before the writes).

    The chain, read after the request, is the one of the version read whenever the
    writes are made: every transaction that changes a chain changes its request's row
    too (its approvals, ``has_steps``), and with it the version.

    ``action``: the transition asked for, or (a step vote) what makes it, with its
    author, from the view read.

    ``before_writes``: checks made once the state machine has answered (its refusals
    come first), before anything is written; they may raise.

    None when the lock must decide instead: a transition that writes more than queued
    writes (a comment, a callback, a chain replaced: ``effects.writes_in_one_statement``),
    a refusal answered from reads that were not one snapshot, or too many lost races.
    The state machine stays the one gate either way; a transition taken here is exactly
    what it answers for the version its writes are conditional on.
    """
    repo = uow.approvals
    reads = ApprovalReads(repo.queries)  # type: ignore[arg-type]
    changes = len(uow.changes)
    # A step vote reads the chain with its request, in the same statement.
    with_chain = callable(action) or isinstance(action, state.VoteStep)
    for _ in range(UNLOCKED_ATTEMPTS):
        found = await repo.read_versioned(
            principal.org_id, request_id, check, with_chain=with_chain
        )
        if found is None:
            raise NotFound("No approval request with this id.")
        row, version, chain = found
        if chain is None:
            chain = await reads.list_steps(row.id) if row.has_steps else []
        # One read is one snapshot; steps or voters read after it may be newer than it.
        one_snapshot = (
            (with_chain or not row.has_steps)
            and not _reads_voters(row, chain)
            and not any(step.group_id for step in chain)  # its members and votes read after
        )
        view = await _view_with(reads, row, chain)
        asked, author = (await action(view)) if callable(action) else (action, author)
        try:
            transition = state.apply(view, asked, now)
        except AppError:
            if one_snapshot:
                raise
            return None  # the locked view answers
        if not effects.writes_in_one_statement(transition, row):
            return None
        if before_writes is not None:
            await before_writes(reads)
        try:
            async with repo.unless_changed(row.id, version):
                changed = await effects.apply_transition(
                    uow, row, transition, author or author_of(principal), now
                )
        except LostRace:
            del uow.changes[changes:]  # nothing was written: nothing to announce
            continue
        return TransitionResult(changed, transition), chain
    return None


async def _transition(
    uow: ApprovalsWork,
    row: RequestRecord,
    action: state.Action,
    principal: OrgMember | None,
    now: datetime,
    author: effects.Author | None = None,
) -> TransitionResult:
    """Ask the state machine about ``action`` on the locked ``row``, and apply its answer
    (``author``: as the records name the person, if not ``author_of(principal)``)."""
    transition = state.apply(await _view(uow.approvals, row), action, now)
    author = author or author_of(principal)
    row = await effects.apply_transition(uow, row, transition, author, now)
    return TransitionResult(row, transition)


def _via(payload: DecideApprovalRequest) -> str | None:
    """A decision made from a notification says so in its audit event."""
    return payload.via if isinstance(payload, RelayedDecision) else None


def author_of(
    principal: OrgMember | None, stands_in_for: Mapping[uuid.UUID, str] | None = None
) -> effects.Author | None:
    if principal is None:
        return None
    return effects.Author(
        principal.user_id, principal.user_email, principal.user_name, stands_in_for or {}
    )


async def cancel(
    uow: ApprovalsWork, principal: OrgMember, request_id: uuid.UUID, now: datetime
) -> TransitionResult:
    return await _cancel(uow, principal.org_id, principal, request_id, now)


# Requests cancelled per transaction by the hard stop: each batch holds the writer (SQLite)
# or its rows' locks (PostgreSQL) for a bounded time, so other writers go on in between
# (docs/operations.md, *Emergency stop*).
CANCEL_BATCH_SIZE = 100


async def cancel_all_pending(
    transaction: Callable[[], AbstractAsyncContextManager[Work]],
    org_id: uuid.UUID,
    principal: OrgMember | None,
    committed: Callable[[Work, list[TransitionResult]], Awaitable[None]] | None = None,
    *,
    poisoned: PoisonedRows | None = None,
    batch_size: int | None = None,
    clock: Callable[[], datetime] = utcnow,
) -> int:
    """The hard stop of ``emergency-stop on --cancel-pending``: cancel every pending request
    of the org, ``batch_size`` per transaction; answers how many were cancelled.

    The caller has committed the org's emergency stop first, so no request of the org is
    created or decided meanwhile. Each batch commits its cancellations with their
    callbacks (the outbox), whose attempt 1 the ``transaction`` starts as its caller
    chose; then ``committed(uow, results)``, if given, runs. A crash part-way leaves the
    stop on and the rest still pending, visibly; running the stop again cancels the rest.
    Requests are listed again once the list is done, in case one was created just before
    the stop (a caller authenticated before it), until none is left that was not tried.

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
                results = await cancel_pending(uow, org_id, principal, batch, clock(), poisoned)
            cancelled += len(results)
            if committed is not None:
                await committed(uow, results)


async def cancel_pending(
    uow: ApprovalsWork,
    org_id: uuid.UUID,
    principal: OrgMember | None,
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
            async with uow.approvals.savepoint():
                results.append(await _cancel(uow, org_id, principal, request_id, now))
        except (RequestNotPending, NotFound):
            # Decided, cancelled or expired meanwhile (or past its deadline already: the
            # sweep expires it).
            continue
        except Exception as exc:  # one bad row must not keep the others from stopping
            (poisoned or PoisonedRows()).park(CANCEL_JOB, request_id, exc)
    return results


async def _cancel(
    uow: ApprovalsWork,
    org_id: uuid.UUID,
    principal: OrgMember | None,
    request_id: uuid.UUID,
    now: datetime,
) -> TransitionResult:
    row = await uow.approvals.get_locked(org_id, request_id)
    if row is None:
        raise NotFound("No approval request with this id.")
    action = state.Cancel(principal.actor if principal else None)
    return await _transition(uow, row, action, principal, now)


EXPIRY_JOB = "expiry"
CANCEL_JOB = "emergency_stop"


async def expire_due(
    uow: ApprovalsWork, now: datetime, batch_size: int, poisoned: PoisonedRows
) -> list[TransitionResult]:
    """Mark pending requests past their deadline as expired (the sweep's one step).

    The batch is expired together, in one savepoint (``effects.apply_transitions``: a few
    statements for all its requests). Should that fail, each request is expired in a
    savepoint of its own instead: one that cannot be (say, its callback cannot be built)
    is rolled back alone and parked, and the rest commit.
    """
    repo = uow.approvals
    rows = await repo.due_for_expiry(now, batch_size, poisoned.parked(EXPIRY_JOB))
    if not rows:
        return []
    claimed, changes = len(uow.outbox.claimed), len(uow.changes)
    try:
        async with repo.savepoint():
            return await _transition_many(uow, rows, state.Expire(), now)
    except Exception:
        # Undone: what the batch handed to the outbox and to watchers goes with it.
        del uow.outbox.claimed[claimed:], uow.changes[changes:]
    results = []
    for row in rows:
        try:
            async with repo.savepoint():
                results.append(await _transition(uow, row, state.Expire(), None, now))
        except Exception as exc:  # one bad row must not hold every other org's expiries
            poisoned.park(EXPIRY_JOB, row.id, exc)
    return results


async def _transition_many(
    uow: ApprovalsWork, rows: Sequence[RequestRecord], action: state.Action, now: datetime
) -> list[TransitionResult]:
    """``_transition`` of the operator's or the clock's ``action`` (no person acts) on
    many locked rows, their effects written together."""
    views = await _views(uow.approvals, rows)
    transitions = [state.apply(view, action, now) for view in views]
    changed = await effects.apply_transitions(
        uow, list(zip(rows, transitions, strict=True)), None, now
    )
    return [TransitionResult(row, t) for row, t in zip(changed, transitions, strict=True)]


async def add_comment(
    repo: ApprovalRepository,
    principal: OrgMember,
    request_id: uuid.UUID,
    body: str,
    now: datetime,
) -> Comment:
    # Every writer of a request locks its row first, so two writers can never hold
    # weaker locks and wait for each other's upgrade (a deadlock on PostgreSQL).
    row = await _get_locked(repo, principal, request_id)
    check_own_request(principal, row.connection_id)
    _, comment = await effects.add_comment(repo, row, principal.user_id, body, now)
    await repo.flush()
    return comment


async def list_comments(
    repo: ApprovalRepository, principal: OrgMember, request_id: uuid.UUID
) -> Sequence[Comment]:
    await get_request(repo, principal, request_id)
    return await repo.list_comments(request_id)


async def list_events(
    repo: ApprovalRepository, principal: OrgMember, request_id: uuid.UUID
) -> Sequence[AuditEvent]:
    await get_request(repo, principal, request_id)
    return await repo.list_events(request_id)


# ---- approval chains (decisions.md section 2) ----


StepSpec = state.StepSpec


async def set_steps(
    uow: ApprovalsWork,
    principal: Principal,
    request_id: uuid.UUID,
    specs: Sequence[StepSpec],
    now: datetime,
    check: PrincipalCheck | None = None,
    *,
    by_policy: bool = False,
) -> Sequence[StepRecord]:
    """Replace the request's chain; who may, and when, is the state machine's to say
    (``state.ConfigureSteps``). ``check``: the principal came from memory; the first
    read confirms it (``PrincipalCheck``). ``by_policy``: the org's policy sets the chain
    of a request being created (its admins wrote it), whoever creates it."""
    actor = replace(principal.actor, is_admin=True) if by_policy else principal.actor
    action = state.ConfigureSteps(actor, tuple(specs))
    org_id = principal.org_id
    if uow.approvals.can_decide_without_lock:
        reads = ApprovalReads(uow.approvals.queries)  # type: ignore[arg-type]
        # The approvers are read beside the request, not after it: the configuration
        # waits for two round trips instead of three. What the read says is answered
        # only after the state machine's refusals.
        known = asyncio.ensure_future(reads.org_user_ids(org_id, _approvers(specs)))

        async def approvers_known(_: ApprovalReads) -> None:
            _refuse_unknown(specs, await known)
            await _check_groups(reads, org_id, specs)

        try:
            done = await _without_lock(
                uow, principal, request_id, action, now, check, approvers_known
            )
        finally:
            if not known.done():
                with contextlib.suppress(Exception):
                    await known  # a refusal came first: the read ends before the call
        if done is not None:
            # Committed (one statement of its own): the chain as written.
            return uow.approvals.chain_written(request_id)
    row = await _get_locked(uow.approvals, principal, request_id, check)
    # Refusals first: a stranger learns nothing of which approvers exist.
    transition = state.apply(await _view(uow.approvals, row), action, now)
    await _check_approvers(uow.approvals, org_id, specs)
    await _check_groups(uow.approvals, org_id, specs)
    await effects.apply_transition(uow, row, transition, author_of(principal), now)
    # The chain as written, not read again: under the lock, nothing else changed it.
    return uow.approvals.chain_written(request_id)


async def _check_approvers(
    repo: ApprovalRepository | ApprovalReads, org_id: uuid.UUID, specs: Sequence[StepSpec]
) -> None:
    _refuse_unknown(specs, await repo.org_user_ids(org_id, _approvers(specs)))


def _approvers(specs: Sequence[StepSpec]) -> set[uuid.UUID]:
    return {spec.approver_id for spec in specs if spec.approver_id is not None}


def _refuse_unknown(specs: Sequence[StepSpec], known: frozenset[uuid.UUID]) -> None:
    """Refuse a chain whose approvers are not each one user of the org (``known``: those
    of them who are), or that names a person or a group twice."""
    people = [spec for spec in specs if spec.approver_id is not None]
    groups = {spec.group_id for spec in specs if spec.group_id is not None}
    if len(_approvers(specs)) != len(people) or len(groups) != len(specs) - len(people):
        raise ValidationFailed.for_field(
            "steps", "each approver or group may hold one step only (nobody counts twice)"
        )
    unknown = [
        {"field": f"steps.{index}.approver_id", "message": "is not a user of this organization"}
        for index, spec in enumerate(specs)
        if spec.approver_id is not None and spec.approver_id not in known
    ]
    if unknown:
        raise ValidationFailed.for_fields(unknown)


async def _check_groups(
    repo: ApprovalRepository | ApprovalReads, org_id: uuid.UUID, specs: Sequence[StepSpec]
) -> None:
    """Refuse a group step whose group is not the org's (another org's reads as unknown),
    or whose quorum exceeds the group's active members."""
    groups = {spec.group_id for spec in specs if spec.group_id is not None}
    if not groups:
        return
    names = await repo.group_names(org_id, groups)
    members = await repo.active_members(org_id, set(names))
    refused = []
    for index, spec in enumerate(specs):
        if spec.group_id is None:
            continue
        if spec.group_id not in names:
            message = "is not a group of this organization"
            refused.append({"field": f"steps.{index}.group_id", "message": message})
        elif spec.required_approvals > len(members[spec.group_id]):
            count = len(members[spec.group_id])
            message = f"must be from 1 to the group's {count} active members"
            refused.append({"field": f"steps.{index}.required_approvals", "message": message})
    if refused:
        raise ValidationFailed.for_fields(refused)


async def group_names_of(
    repo: ApprovalRepository | ApprovalReads, org_id: uuid.UUID, steps: Sequence[StepRecord]
) -> dict[uuid.UUID, str]:
    """The names of the groups ``steps`` name (read only when a step names one)."""
    groups = {step.group_id for step in steps if step.group_id is not None}
    return await repo.group_names(org_id, groups) if groups else {}


async def list_steps(
    repo: ApprovalRepository, principal: OrgMember, request_id: uuid.UUID
) -> Sequence[StepRecord]:
    await get_request(repo, principal, request_id)
    return await repo.list_steps(request_id)


async def _vote_step(
    uow: ApprovalsWork,
    principal: OrgMember,
    request_id: uuid.UUID,
    step_id: uuid.UUID,
    payload: DecideApprovalRequest,
    now: datetime,
    check: PrincipalCheck | None = None,
    stands_in_for: Mapping[uuid.UUID, str] | None = None,
) -> TransitionResult:
    """A vote on one step of the chain; ``stands_in_for``: the away people whose steps
    the voter may vote too, with their names (None: read here, and only when the step
    is not the voter's own).

    Without a lock (PostgreSQL), whom the voter stands in for is read, when it must be,
    once the chain is read. Under the lock (SQLite, or a lost race), the chain read for
    the state machine is the one written: the voted step is answered as the transition
    writes it, not read again."""
    repo = uow.approvals
    if repo.can_decide_without_lock:
        author: effects.Author | None = None

        async def vote_on(view: state.RequestView) -> tuple[state.VoteStep, effects.Author | None]:
            # Asked again of each version read: a group's members may change in between.
            nonlocal author
            away = stands_in_for
            if away is None:
                away = await _stands_in_for_on(repo, principal, view, step_id, now)
            action, author = _step_vote(principal, step_id, payload, away)
            return action, author

        done = await _without_lock(uow, principal, request_id, vote_on, now, check)
        if done is not None:
            return _step_voted(done[0], done[1], step_id, author, now)
    # Two reads, not one joined read: the join's rows repeat the request's columns, and
    # converting them once a step costs SQLite's writer more than the statement it saves.
    row = await _get_locked(repo, principal, request_id, check)
    steps = await repo.list_steps(row.id) if row.has_steps else ()
    view = await _view_with(repo, row, steps)
    if stands_in_for is None:
        stands_in_for = await _stands_in_for_on(repo, principal, view, step_id, now)
    action, author = _step_vote(principal, step_id, payload, stands_in_for)
    transition = state.apply(view, action, now)
    changed = await effects.apply_transition(uow, row, transition, author, now)
    return _step_voted(TransitionResult(changed, transition), steps, step_id, author, now)


def _step_vote(
    principal: OrgMember,
    step_id: uuid.UUID,
    payload: DecideApprovalRequest,
    stands_in_for: Mapping[uuid.UUID, str],
) -> tuple[state.VoteStep, effects.Author | None]:
    """The state machine's action for a vote on ``step_id``, and its author as the
    records name them."""
    actor = replace(principal.actor, stands_in_for=frozenset(stands_in_for))
    action = state.VoteStep(
        actor,
        step_id,
        payload.decision,
        payload.comment,
        payload.source,
        _via(payload),
        payload.arguments,
    )
    return action, author_of(principal, stands_in_for)


def _step_voted(
    result: TransitionResult,
    steps: Sequence[StepRecord],
    step_id: uuid.UUID,
    author: effects.Author | None,
    now: datetime,
) -> TransitionResult:
    """``result`` with the voted step as written, from ``steps``, the chain as read for
    the transition (the state machine found the step in it)."""
    (voted,) = (step for step in steps if step.id == step_id)
    written = effects.step_as_written(voted, result.transition, author, now)
    return TransitionResult(result.request, result.transition, written)


async def _stands_in_for_on(
    repo: ApprovalRepository,
    member: OrgMember,
    view: state.RequestView,
    step_id: uuid.UUID,
    now: datetime,
) -> Mapping[uuid.UUID, str]:
    """The away people ``member`` stands in for, as far as a vote on ``step_id`` of
    ``view`` can count for one: none to read when the step is their own, or a group's
    of which they are an active member (they vote as themselves: ``state``'s
    ``_on_behalf_of``), nor when the chain has no such step (the state machine refuses)."""
    step = next((s for s in view.steps if s.id == step_id), None)
    if step is None or member.user_id in (step.approver_id, *step.members):
        return {}
    return await repo.stood_in_for(member.org_id, member.user_id, now)


async def steps_and_votes(
    repo: ApprovalRepository | ApprovalReads, row: RequestRecord
) -> tuple[Sequence[StepRecord], Sequence[VoteRecord]]:
    """What the single read shows beside the request: its chain and the votes cast.

    Each is queried only when the row says there can be any, to keep reads cheap.
    """
    steps = await repo.list_steps(row.id) if row.has_steps else ()
    may_have_votes = row.has_steps or row.current_approvals > 0 or row.decided_by is not None
    votes = await repo.list_votes(row.id) if may_have_votes else ()
    return steps, votes


# ---- internals ----


async def _get_locked(
    repo: ApprovalRepository,
    principal: OrgMember,
    request_id: uuid.UUID,
    check: PrincipalCheck | None = None,
) -> RequestRecord:
    row = await repo.get_locked(principal.org_id, request_id, check)
    if row is None:
        raise NotFound("No approval request with this id.")
    return row


async def _view(repo: ApprovalRepository | ApprovalReads, row: RequestRecord) -> state.RequestView:
    """The state machine's snapshot of a (locked) request: its votes and its chain."""
    steps = await repo.list_steps(row.id) if row.has_steps else ()
    return await _view_with(repo, row, steps)


async def _view_with(
    repo: ApprovalRepository | ApprovalReads, row: RequestRecord, steps: Sequence[StepRecord]
) -> state.RequestView:
    """``_view`` of ``row`` with its chain ``steps``, read already; a chain with group
    steps also reads their groups' active members and the votes cast on them."""
    voters = await repo.count_based_voters(row.id) if _reads_voters(row, steps) else frozenset()
    groups = {s.group_id for s in steps if s.group_id is not None}
    if not groups:
        return _view_of(row, steps, voters)
    members = await repo.active_members(row.org_id, groups)
    step_voters: dict[uuid.UUID, set[uuid.UUID]] = {}
    for vote in await repo.list_votes(row.id):
        if vote.step_id is not None:
            # The voter, and the away member a delegate voted for: each counts once.
            voted = step_voters.setdefault(vote.step_id, set())
            voted.update(u for u in (vote.user_id, vote.on_behalf_of) if u is not None)
    return _view_of(row, steps, voters, members, step_voters)


def _reads_voters(row: RequestRecord, steps: Sequence[StepRecord]) -> bool:
    """Whether the view of ``row`` reads its count-based voters. Each count-based vote is
    an approval counted in the row (a reject ends the request), so a pending request that
    counts none has no voters to read. The row is the locked, latest version, so a vote
    committed meanwhile shows in its count."""
    return row.status == "pending" and not steps and row.current_approvals > 0


async def _views(
    repo: ApprovalRepository, rows: Sequence[RequestRecord]
) -> list[state.RequestView]:
    """``_view`` of many (locked) requests: their chains, then their voters, in two queries."""
    steps = await repo.steps_of([row.id for row in rows if row.has_steps])
    count_based = [
        row.id
        for row in rows
        if row.status == "pending" and not steps.get(row.id) and row.current_approvals > 0
    ]
    voters = await repo.count_based_voters_of(count_based)
    return [_view_of(row, steps.get(row.id, ()), voters.get(row.id, frozenset())) for row in rows]


def _view_of(
    row: RequestRecord,
    steps: Sequence[StepRecord],
    voters: frozenset[uuid.UUID],
    members: Mapping[uuid.UUID, frozenset[uuid.UUID]] | None = None,
    step_voters: Mapping[uuid.UUID, set[uuid.UUID]] | None = None,
) -> state.RequestView:
    return state.RequestView(
        status=row.status,  # type: ignore[arg-type]
        required_approvals=row.required_approvals,
        current_approvals=row.current_approvals,
        expires_at=row.expires_at,
        is_sequential=row.is_sequential,
        voters=voters,
        steps=tuple(
            state.StepView(
                s.id,
                s.step_order,
                s.approver_id,
                cast(state.StepStatus, s.status),
                s.decided_by,
                s.group_id,
                (members or {}).get(s.group_id, frozenset()) if s.group_id else frozenset(),
                s.required_approvals,
                s.current_approvals,
                frozenset((step_voters or {}).get(s.id, ())),
            )
            for s in steps
        ),
        connection_id=row.connection_id,
        has_callback=bool(row.callback_url),
        arguments=row.arguments,
        arguments_schema=row.arguments_schema,
        arguments_hash=row.arguments_hash,
    )
