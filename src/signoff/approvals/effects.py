"""Applying a transition: the one place that writes what a status change causes.

``state.apply`` answers a ``Transition`` whose ``effects`` list everything the change
causes, in order. ``apply_transition`` writes them over the unit of work, in the caller's
transaction: the request's new state, the vote, step changes, the comment, audit events,
the callback's outbox row, the notifications' plan rows, and the signal that wakes long
polls and live pages once the transaction commits; ``apply_create`` writes a create's
(the row, its event, its notification plan); ``apply_transitions`` a batch's. Each effect
is dispatched in one place, ``_dispatch``, to a sink that writes it at once or gathers it
to be written together. A new consequence of a create or a decision is a new effect in
``state.py`` and a new case here, nowhere else.

It needs only the ``EffectsUnitOfWork`` protocol, so ``tests/approvals/test_effects.py``
applies transitions to an in-memory fake in milliseconds.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Protocol

import jsonpatch

from signoff import metrics
from signoff.approvals import state
from signoff.approvals.repository import NewEvent, NewVote, StandingUse
from signoff.approvals.typed_rows import RequestRecord, StepRecord, new_row, record_written
from signoff.auth.principal import PrincipalCheck
from signoff.common.ids import new_id
from signoff.errors import RequestNotPending
from signoff.models import Comment
from signoff.webhooks.service import CIBA_SOURCE, Decider, DecisionFacts


@dataclass(frozen=True)
class Author:
    """The person a transition is made by, as its records name them (None: the operator
    or the clock)."""

    user_id: uuid.UUID
    email: str
    name: str
    # The away people this person stands in for, by id, with their names: a vote for
    # one of them is recorded as "Bob for Ann" (``as_voted``).
    stands_in_for: Mapping[uuid.UUID, str] = field(default_factory=dict, compare=False)


def as_voted(author: Author | None, transition: state.Transition) -> Author | None:
    """The author as the decision's records name them: "Bob for Ann" when the vote was
    cast for an away approver (the state machine's ``on_behalf_of``)."""
    if author is None or not author.stands_in_for:
        return author
    for effect in transition.effects:
        if isinstance(effect, state.WriteEvent) and "on_behalf_of" in effect.data:
            stood_in = author.stands_in_for.get(uuid.UUID(effect.data["on_behalf_of"]))
            if stood_in is not None:
                return replace(author, name=f"{author.name} for {stood_in}")
    return author


class ApprovalWrites(Protocol):
    """What applying a transition writes of a request (``ApprovalRepository``)."""

    async def insert_unless_key_taken(
        self,
        row: dict[str, Any],
        record: RequestRecord,
        event: NewEvent,
        check: PrincipalCheck | None = None,
        *,
        then: Sequence[NewEvent] = (),
        standing: StandingUse | None = None,
    ) -> RequestRecord | None: ...

    @property
    def can_write_plan_with_insert(self) -> bool: ...

    @property
    def writes_at_once(self) -> bool: ...

    async def update_if_pending(
        self, request_id: uuid.UUID, values: dict[str, Any], refusal: Callable[[], Exception]
    ) -> None: ...

    async def update_many_if_pending(
        self, changes: Sequence[tuple[uuid.UUID, dict[str, Any]]]
    ) -> int: ...

    async def add_vote(self, vote: NewVote) -> None: ...

    async def delete_votes(self, request_id: uuid.UUID) -> None: ...

    async def update_step(
        self,
        step_id: uuid.UUID,
        *,
        status: str,
        decided_at: datetime | None,
        decided_by: uuid.UUID | None,
        comment: str | None,
    ) -> None: ...

    async def replace_steps(
        self, request_id: uuid.UUID, steps: Sequence[StepRecord], *, replacing: bool
    ) -> None: ...

    async def add_comment(self, comment: Comment) -> None: ...

    async def add_event(self, event: NewEvent) -> None: ...

    async def add_events(self, events: Sequence[NewEvent]) -> None: ...

    async def flush(self) -> None: ...


class CallbackOutbox(Protocol):
    """Where a decision's callback is stored, claimed by the transaction (webhooks)."""

    async def enqueue(self, facts: DecisionFacts, now: datetime) -> None: ...

    async def enqueue_many(self, facts: Sequence[DecisionFacts], now: datetime) -> None: ...


class NotificationOutbox(Protocol):
    """Where the notifications a change causes are written (notifications domain)."""

    async def request_created(self, request: RequestRecord, now: datetime) -> None: ...

    async def steps_opened(
        self, request: RequestRecord, approver_ids: Sequence[uuid.UUID], now: datetime
    ) -> None: ...

    async def asked_again(
        self, request: RequestRecord, user_ids: Sequence[uuid.UUID], now: datetime
    ) -> None: ...

    async def left_pending(self, request_id: uuid.UUID, now: datetime) -> None: ...

    async def left_pending_many(self, request_ids: Sequence[uuid.UUID], now: datetime) -> None: ...


class ReceiptWrites(Protocol):
    """Where an approval's receipt is stored (receipts domain); it is signed on read."""

    async def issue(
        self, request: RequestRecord, decided_by: Sequence[uuid.UUID], now: datetime
    ) -> str:
        """Store the receipt's claims; answer what the callback's row holds for it."""


class EffectsUnitOfWork(Protocol):
    @property
    def approvals(self) -> ApprovalWrites: ...

    @property
    def receipts(self) -> ReceiptWrites: ...

    @property
    def callbacks(self) -> CallbackOutbox: ...

    @property
    def notifications(self) -> NotificationOutbox: ...

    def request_changed(self, org_id: uuid.UUID, request_id: uuid.UUID, *, final: bool) -> None:
        """Signal watchers of the request once the transaction commits."""


async def apply_transition(
    uow: EffectsUnitOfWork,
    row: RequestRecord,
    transition: state.Transition,
    author: Author | None,
    now: datetime,
    *,
    written: RequestRecord | None = None,
) -> RequestRecord:
    """Write every effect of ``transition`` on the locked request ``row``, in order; the
    request as it now is. ``written``: the request's new state is written already (a
    decision written before its read, ``state.UnreadDecision``), as this row: its update
    is checked against it, not made again."""
    author = as_voted(author, transition)
    sink = _WriteNow(uow, now, written)
    for effect in transition.effects:
        row = await _dispatch(sink, row, effect, author, now)
    await uow.approvals.flush()
    # Counted once written: a decision whose writes were refused (a lost race) is not.
    if transition.is_final:
        metrics.count_decision(transition.status)
    return row


async def apply_create(
    uow: EffectsUnitOfWork,
    values: dict[str, Any],
    transition: state.Transition,
    author: Author,
    now: datetime,
    check: PrincipalCheck | None = None,
    *,
    plan: bool = True,
    standing: StandingUse | None = None,
) -> RequestRecord | None:
    """Write the effects of a create (``state.Create``) of a request of ``values`` (by
    column; the others take their defaults): the request as written, or None, having
    written nothing, if the org's request with its idempotency key exists.

    The row, its event and its notification plan go to the storage together, which
    writes them as it writes a create best (on PostgreSQL one statement,
    ``ApprovalRepository.insert_unless_key_taken``). ``check``: the principal came from
    memory; the insert confirms it (``PrincipalCheck``). ``plan``: False when the org
    is known to have no notification channel (``storage.channel_presence``), where a
    storage that writes the plan apart (SQLite) skips its statement, which would write
    nothing. ``standing``: the standing approval's use the create's statement takes
    (PostgreSQL), its uses then set in the decision event's ``standing_approval``."""
    # Whether its plan row may be written: the decision's reminders to void (0052).
    planned = plan or uow.approvals.can_write_plan_with_insert
    row = new_row({**values, "notifications_planned": planned})
    record = record_written(row)
    gathered = _Gathered()
    # The row's own event goes with the insert; what a policy adds (its notes, its
    # decision's event, receipt and callback) is written once the row exists, in order.
    after: list[state.Effect] = []
    for effect in transition.effects:
        if isinstance(effect, _CREATE_AFTER) and (gathered.events or after):
            after.append(effect)
            continue
        record = await _dispatch(gathered, record, effect, author, now)
    (created_event,) = gathered.events
    # The events written next (a policy's notes, its decision's event) go with the row's
    # own: on SQLite one statement for them all. A policy decides, not the creator: they
    # name no person.
    then: list[NewEvent] = []
    while after and isinstance(after[0], state.WriteEvent):
        note = after.pop(0)
        assert isinstance(note, state.WriteEvent)
        then.append(event(record, note.type, None, now, dict(note.data)))
    if standing is not None:
        for later in then:
            if isinstance(later.data.get("standing_approval"), dict):
                standing.event_data = later.data["standing_approval"]
    created = await uow.approvals.insert_unless_key_taken(
        row, record, created_event, check, then=then, standing=standing
    )
    if created is None:
        return None
    if plan and gathered.created_plans and not uow.approvals.can_write_plan_with_insert:
        await uow.notifications.request_created(created, now)
    if after:
        sink = _WriteNow(uow, now)
        for effect in after:
            # A policy decides, not the creator: its events name no person.
            created = await _dispatch(sink, created, effect, None, now)
        # Where queued writes are made at once (SQLite), a decision's event and receipt
        # are written by now and leave nothing to flush; a callback may.
        if not uow.approvals.writes_at_once or any(
            not isinstance(effect, _QUEUED_EFFECTS) for effect in after
        ):
            await uow.approvals.flush()
    for org_id, request_id, final in gathered.changes:
        uow.request_changed(org_id, request_id, final=final)
    return created


# The effects of a create written after its row (``apply_create``).
_CREATE_AFTER = (state.WriteEvent, state.IssueReceipt, state.SendCallback)


# The effects whose writes are all queued (``storage.queue_write``) and read nothing:
# a transition of only these is written in one statement (a decision or a step vote
# without a lock on PostgreSQL, ``service.decide``). A callback reads its connection's
# secrets and a comment writes through the session: those are made under the lock.
_QUEUED_EFFECTS = (
    state.UpdateRequest,
    state.RecordVote,
    state.ChangeStep,
    state.WriteEvent,
    state.IssueReceipt,
    state.NotifyStepsOpened,
    state.AskAgain,
    state.StopReminders,
    state.PublishChange,
)


def writes_in_one_statement(transition: state.Transition, row: RequestRecord) -> bool:
    """Whether every write of ``transition`` on ``row`` is queued, so that they can go
    out as one statement (``ApprovalRepository.unless_changed``). A chain's first steps
    are inserts queued like the rest; replacing steps deletes the old ones first, on its
    own, since the new ones take their places in the chain (its unique step orders)."""
    return all(
        isinstance(effect, _QUEUED_EFFECTS)
        or (isinstance(effect, state.ReplaceSteps) and not row.has_steps)
        for effect in transition.effects
    )


# The effects ``apply_transitions`` writes for many requests at once; a transition with
# any other effect (a vote, a step, a comment, opened steps) is applied on its own.
_BATCHED_EFFECTS = (
    state.UpdateRequest,
    state.WriteEvent,
    state.SendCallback,
    state.StopReminders,
    state.PublishChange,
)


async def apply_transitions(
    uow: EffectsUnitOfWork,
    items: Sequence[tuple[RequestRecord, state.Transition]],
    author: Author | None,
    now: datetime,
) -> list[RequestRecord]:
    """``apply_transition`` for many locked requests (a batch of the expiry sweep): the
    same effects, with the same values, each kind written for all requests in one
    statement instead of one per request. The requests as they now are, in order.

    Raises ``RequestNotPending``, having written part of the batch, if any request was no
    longer pending: the caller's savepoint undoes the batch (the row locks make that
    unreachable, as for ``apply_transition``)."""
    gathered = _Gathered()
    results: list[RequestRecord] = []
    for locked, transition in items:
        row = locked
        if all(isinstance(effect, _BATCHED_EFFECTS) for effect in transition.effects):
            for effect in transition.effects:
                row = await _dispatch(gathered, row, effect, author, now)
            results.append(row)
        else:
            results.append(await apply_transition(uow, row, transition, author, now))
    if await uow.approvals.update_many_if_pending(gathered.updates) != len(gathered.updates):
        raise RequestNotPending("pending")
    await uow.approvals.add_events(gathered.events)
    if gathered.callbacks:
        await uow.callbacks.enqueue_many(gathered.callbacks, now)
    if gathered.left_pending_ids:
        await uow.notifications.left_pending_many(gathered.left_pending_ids, now)
    for org_id, request_id, final in gathered.changes:
        uow.request_changed(org_id, request_id, final=final)
    await uow.approvals.flush()
    for outcome in gathered.decisions:
        metrics.count_decision(outcome)
    return results


# ---- what each effect writes: one dispatcher, two ways of writing ----


class _Sink(Protocol):
    """Where the writes of effects go: at once, one by one (``_WriteNow``), or gathered
    to be written together (``_Gathered``)."""

    async def update(self, row: RequestRecord, values: dict[str, Any]) -> None: ...

    async def vote(self, vote: NewVote) -> None: ...

    async def dismiss_votes(self, row: RequestRecord) -> None: ...

    async def change_step(self, step_id: uuid.UUID, values: dict[str, Any]) -> None: ...

    async def replace_steps(self, row: RequestRecord, steps: Sequence[StepRecord]) -> None: ...

    async def comment(self, comment: Comment) -> None: ...

    async def event(self, event: NewEvent) -> None: ...

    async def callback(self, facts: DecisionFacts) -> None: ...

    async def receipt(self, row: RequestRecord, decided_by: Sequence[uuid.UUID]) -> None: ...

    def receipt_of(self, request_id: uuid.UUID) -> str | None:
        """What the callback's row holds for the receipt an earlier effect issued."""

    async def created(self, row: RequestRecord) -> None: ...

    async def steps_opened(self, row: RequestRecord, approver_ids: Sequence[uuid.UUID]) -> None: ...

    async def asked_again(self, row: RequestRecord, user_ids: Sequence[uuid.UUID]) -> None: ...

    async def left_pending(self, row: RequestRecord) -> None: ...

    def publish(self, row: RequestRecord, final: bool) -> None: ...


async def _dispatch(
    sink: _Sink,
    row: RequestRecord,
    effect: state.Effect,
    author: Author | None,
    now: datetime,
) -> RequestRecord:
    """Write one effect to ``sink``; the request as it is after it."""
    actor_id = author.user_id if author else None
    match effect:
        case state.InsertRequest():
            pass  # the row is the create's own (``apply_create``)
        case state.UpdateRequest():
            values = _request_values(row, effect, author, now)
            await sink.update(row, values)
            return row._replace(**values)
        case state.RecordVote() | state.DismissVotes():
            await _votes(sink, row, effect, author, now)
        case state.ChangeStep():
            await sink.change_step(effect.step_id, _step_values(effect, author, now))
        case state.ReplaceSteps():
            await sink.replace_steps(row, [_new_step(row.id, spec, now) for spec in effect.steps])
        case state.AddComment():
            assert author is not None  # only people comment
            comment, comment_event = _comment(row, author.user_id, effect.body, now)
            await sink.comment(comment)
            await sink.event(comment_event)
            return row._replace(comments_count=row.comments_count + 1)
        case state.WriteEvent():
            await sink.event(event(row, effect.type, actor_id, now, dict(effect.data)))
        case state.IssueReceipt() | state.SendCallback():
            await _decision_output(sink, row, effect, author)
        case state.NotifyCreated():
            await sink.created(row)
        case state.NotifyStepsOpened() | state.AskAgain():
            await _notify(sink, row, effect)
        case state.StopReminders():
            await sink.left_pending(row)
        case state.PublishChange():
            sink.publish(row, effect.final)
    return row


async def _votes(
    sink: _Sink,
    row: RequestRecord,
    effect: state.RecordVote | state.DismissVotes,
    author: Author | None,
    now: datetime,
) -> None:
    """A vote recorded, or (an edit of the arguments) every earlier one dismissed."""
    if isinstance(effect, state.DismissVotes):
        await sink.dismiss_votes(row)
        return
    assert author is not None  # only people vote
    vote = NewVote(
        request_id=row.id,
        step_id=effect.step_id,
        user_id=author.user_id,
        on_behalf_of=effect.on_behalf_of,
        decision=effect.decision,
        comment=effect.comment,
        created_at=now,
    )
    await sink.vote(vote)


async def _notify(
    sink: _Sink, row: RequestRecord, effect: state.NotifyStepsOpened | state.AskAgain
) -> None:
    """Steps opened (a group step's plan names its group: the planner tells its
    members), or people asked again after an edit."""
    if isinstance(effect, state.AskAgain):
        await sink.asked_again(row, effect.user_ids)
    else:
        await sink.steps_opened(row, (*effect.approver_ids, *effect.group_ids))


async def _decision_output(
    sink: _Sink,
    row: RequestRecord,
    effect: state.IssueReceipt | state.SendCallback,
    author: Author | None,
) -> None:
    """A final decision's receipt, or its callback (which carries the receipt)."""
    if isinstance(effect, state.IssueReceipt):
        await sink.receipt(row, effect.decided_by)
    else:
        receipt = sink.receipt_of(row.id)
        await sink.callback(_decision_facts(row, author, effect.comment, receipt))


class _WriteNow:
    """Each write made at once over the unit of work (most are queued by the storage and
    go out together before the next read or the commit)."""

    def __init__(
        self, uow: EffectsUnitOfWork, now: datetime, written: RequestRecord | None = None
    ) -> None:
        self.uow = uow
        self.now = now
        self.receipts: dict[uuid.UUID, str] = {}
        self.written = written

    async def update(self, row: RequestRecord, values: dict[str, Any]) -> None:
        if self.written is not None:
            written, self.written = self.written, None
            if any(getattr(written, column) != value for column, value in values.items()):
                # The state machine answered otherwise than what was written: the raise
                # rolls the transaction back (``state.UnreadDecision`` makes it unreachable).
                raise RuntimeError(f"request {row.id} was written unlike its transition")
            return
        # The row lock (PostgreSQL) or the write lock (SQLite) makes the refusal
        # unreachable; should it ever happen, refusing is right and nothing is written.
        status = row.status
        await self.uow.approvals.update_if_pending(
            row.id, values, lambda: RequestNotPending(status)
        )

    async def vote(self, vote: NewVote) -> None:
        await self.uow.approvals.add_vote(vote)

    async def dismiss_votes(self, row: RequestRecord) -> None:
        await self.uow.approvals.delete_votes(row.id)

    async def change_step(self, step_id: uuid.UUID, values: dict[str, Any]) -> None:
        await self.uow.approvals.update_step(step_id, **values)

    async def replace_steps(self, row: RequestRecord, steps: Sequence[StepRecord]) -> None:
        await self.uow.approvals.replace_steps(row.id, steps, replacing=row.has_steps)

    async def comment(self, comment: Comment) -> None:
        await self.uow.approvals.add_comment(comment)

    async def event(self, event: NewEvent) -> None:
        await self.uow.approvals.add_event(event)

    async def callback(self, facts: DecisionFacts) -> None:
        await self.uow.callbacks.enqueue(facts, self.now)

    async def receipt(self, row: RequestRecord, decided_by: Sequence[uuid.UUID]) -> None:
        self.receipts[row.id] = await self.uow.receipts.issue(row, decided_by, self.now)

    def receipt_of(self, request_id: uuid.UUID) -> str | None:
        return self.receipts.get(request_id)

    async def created(self, row: RequestRecord) -> None:
        await self.uow.notifications.request_created(row, self.now)

    async def steps_opened(self, row: RequestRecord, approver_ids: Sequence[uuid.UUID]) -> None:
        await self.uow.notifications.steps_opened(row, approver_ids, self.now)

    async def asked_again(self, row: RequestRecord, user_ids: Sequence[uuid.UUID]) -> None:
        await self.uow.notifications.asked_again(row, user_ids, self.now)

    async def left_pending(self, row: RequestRecord) -> None:
        if may_have_scheduled(row):
            await self.uow.notifications.left_pending(row.id, self.now)

    def publish(self, row: RequestRecord, final: bool) -> None:
        self.uow.request_changed(row.org_id, row.id, final=final)


def may_have_scheduled(row: RequestRecord) -> bool:
    """Whether ``row`` may have reminders, escalations or warnings to void: only a plan
    row schedules them, and only its create (``notifications_planned``), a chain's steps
    opening (``has_steps``) or an edit asking again (``arguments_edited``) writes one."""
    return row.notifications_planned or row.has_steps or row.arguments_edited


@dataclass
class _Gathered:
    """The writes of effects, gathered effect by effect in each request's order of
    effects, to be written together: a batch of transitions (``apply_transitions``), or a
    create (``apply_create``). Only the effects those hold have a place here."""

    updates: list[tuple[uuid.UUID, dict[str, Any]]] = field(default_factory=list)
    events: list[NewEvent] = field(default_factory=list)
    callbacks: list[DecisionFacts] = field(default_factory=list)
    created_plans: list[uuid.UUID] = field(default_factory=list)
    left_pending_ids: list[uuid.UUID] = field(default_factory=list)
    changes: list[tuple[uuid.UUID, uuid.UUID, bool]] = field(default_factory=list)
    decisions: list[str] = field(default_factory=list)

    async def update(self, row: RequestRecord, values: dict[str, Any]) -> None:
        self.updates.append((row.id, values))
        if values["status"] in state.TERMINAL_STATUSES:
            self.decisions.append(values["status"])

    async def event(self, event: NewEvent) -> None:
        self.events.append(event)

    async def callback(self, facts: DecisionFacts) -> None:
        self.callbacks.append(facts)

    async def created(self, row: RequestRecord) -> None:
        self.created_plans.append(row.id)

    async def left_pending(self, row: RequestRecord) -> None:
        self.left_pending_ids.append(row.id)

    def publish(self, row: RequestRecord, final: bool) -> None:
        self.changes.append((row.org_id, row.id, final))

    async def vote(self, vote: NewVote) -> None:
        raise AssertionError("a vote is written on its own")

    async def dismiss_votes(self, row: RequestRecord) -> None:
        raise AssertionError("an edit is written on its own")

    async def receipt(self, row: RequestRecord, decided_by: Sequence[uuid.UUID]) -> None:
        raise AssertionError("an approval is written on its own")

    def receipt_of(self, request_id: uuid.UUID) -> str | None:
        return None  # only approvals issue receipts, and none is batched

    async def change_step(self, step_id: uuid.UUID, values: dict[str, Any]) -> None:
        raise AssertionError("a step is written on its own")

    async def replace_steps(self, row: RequestRecord, steps: Sequence[StepRecord]) -> None:
        raise AssertionError("a chain is written on its own")

    async def comment(self, comment: Comment) -> None:
        raise AssertionError("a comment is written on its own")

    async def steps_opened(self, row: RequestRecord, approver_ids: Sequence[uuid.UUID]) -> None:
        raise AssertionError("opened steps are written on their own")

    async def asked_again(self, row: RequestRecord, user_ids: Sequence[uuid.UUID]) -> None:
        raise AssertionError("an edit is written on its own")


def unread_values(
    unread: state.UnreadDecision, comment: str | None, author: Author | None, now: datetime
) -> dict[str, Any]:
    """The columns a decision written before its read sets (``state.UnreadDecision``):
    those its transition's ``UpdateRequest`` sets, which ``apply_transition`` checks."""
    final = unread.status in state.TERMINAL_STATUSES
    effect = state.UpdateRequest(
        unread.status, unread.current_approvals, comment=comment if final else None
    )
    values = _state_values(effect, now)
    if final:
        values.update(_decided_fields(effect, author, now))
    return values


def _state_values(effect: state.UpdateRequest, now: datetime) -> dict[str, Any]:
    return {
        "status": effect.status,
        "current_approvals": effect.current_approvals,
        "updated_at": now,
    }


def _request_values(
    row: RequestRecord, effect: state.UpdateRequest, author: Author | None, now: datetime
) -> dict[str, Any]:
    """The columns ``effect`` sets on ``row``."""
    values = _state_values(effect, now)
    if effect.required_approvals is not None:
        values.update(required_approvals=effect.required_approvals, has_steps=True)
    if effect.edit is not None:
        values.update(_edited_fields(row, effect.edit))
    if effect.status in state.TERMINAL_STATUSES:
        values.update(_final_fields(effect, row, author, now))
    return values


def _edited_fields(row: RequestRecord, edit: state.ArgumentsEdit) -> dict[str, Any]:
    """The new arguments; the ones the request was created with are kept at the first
    edit (a later edit keeps the first's)."""
    fields: dict[str, Any] = {
        "arguments": dict(edit.arguments),
        "arguments_hash": edit.new_hash,
        "arguments_edited": True,
    }
    if not row.arguments_edited:
        fields.update(
            original_arguments=row.arguments or {}, original_arguments_hash=row.arguments_hash
        )
    return fields


def _final_fields(
    effect: state.UpdateRequest, row: RequestRecord, author: Author | None, now: datetime
) -> dict[str, Any]:
    if effect.status == "expired":
        # Expiry happened at the deadline, whenever the sweep notices it.
        return {"decided_at": row.expires_at or now}
    return _decided_fields(effect, author, now)


def _decided_fields(
    effect: state.UpdateRequest, author: Author | None, now: datetime
) -> dict[str, Any]:
    """A person's (or the operator's) final transition: who decided, when, and why."""
    fields: dict[str, Any] = {
        "decided_at": now,
        "decided_by": author.user_id if author else None,
        "decided_by_name": author.name if author else None,
        "decision_comment": effect.comment,
    }
    if effect.status == "cancelled":
        fields["cancelled_at"] = now
    return fields


def _decision_facts(
    row: RequestRecord, author: Author | None, comment: str | None, receipt: str | None
) -> DecisionFacts:
    assert row.callback_url is not None  # SendCallback comes only with a callback_url
    decider = None
    if author is not None and row.status != "expired":
        decider = Decider(author.user_id, author.email, author.name)
    return DecisionFacts(
        decided_by_name=row.decided_by_name if decider is None else None,
        request_id=row.id,
        org_id=row.org_id,
        connection_id=row.connection_id,
        status=row.status,
        title=row.title,
        priority=row.priority,
        action_type=row.action_type,
        decided_at=row.decided_at,
        decided_by=decider,
        comment=comment,
        metadata=row.metadata_ or {},
        arguments=row.arguments or {},
        arguments_hash=row.arguments_hash,
        arguments_edited=row.arguments_edited,
        arguments_patch=_patch_since_created(row),
        callback_url=row.callback_url,
        callback_headers_encrypted=row.callback_headers_encrypted,
        # A ping carries no receipt: the client fetches it with its token.
        receipt_encrypted=None if row.source == CIBA_SOURCE else receipt,
        source=row.source,
    )


def _patch_since_created(row: RequestRecord) -> list[dict[str, Any]] | None:
    """The RFC 6902 patch from the arguments the request was created with to its own
    (None when never edited)."""
    if not row.arguments_edited:
        return None
    patch = jsonpatch.make_patch(row.original_arguments or {}, row.arguments or {})
    return list(patch.patch)


def _new_step(request_id: uuid.UUID, spec: state.StepSpec, now: datetime) -> StepRecord:
    return StepRecord(
        id=new_id(),
        request_id=request_id,
        step_order=spec.step_order,
        approver_id=spec.approver_id,
        status="pending",
        decided_at=None,
        decided_by=None,
        comment=None,
        created_at=now,
        group_id=spec.group_id,
        required_approvals=spec.required_approvals,
        current_approvals=0,
    )


def _step_values(effect: state.ChangeStep, author: Author | None, now: datetime) -> dict[str, Any]:
    """The columns ``effect`` sets on its step (a step reopened by an edit: undecided; a
    group step's vote short of its quorum: counted, still undecided)."""
    counted = {} if effect.approvals is None else {"current_approvals": effect.approvals}
    if effect.status == "pending":
        reopened = {} if counted else {"current_approvals": 0}
        undecided = {"status": "pending", "decided_at": None, "decided_by": None, "comment": None}
        return undecided | reopened | counted
    return {
        "status": effect.status,
        "decided_at": now,
        "decided_by": author.user_id if author and effect.voted else None,
        "comment": effect.comment,
        **counted,
    }


def step_as_written(
    step: StepRecord, transition: state.Transition, author: Author | None, now: datetime
) -> StepRecord:
    """``step`` as ``transition`` writes it (unchanged if it does not change it)."""
    for effect in transition.effects:
        if isinstance(effect, state.ChangeStep) and effect.step_id == step.id:
            return step._replace(**_step_values(effect, author, now))
    return step


async def add_comment(
    approvals: ApprovalWrites, row: RequestRecord, user_id: uuid.UUID, body: str, now: datetime
) -> tuple[RequestRecord, Comment]:
    """A comment and its audit event (one added on its own, outside a transition); the
    request as it now is, and the comment."""
    comment, comment_event = _comment(row, user_id, body, now)
    await approvals.add_comment(comment)
    await approvals.add_event(comment_event)
    return row._replace(comments_count=row.comments_count + 1), comment


def _comment(
    row: RequestRecord, user_id: uuid.UUID, body: str, now: datetime
) -> tuple[Comment, NewEvent]:
    """A comment on ``row`` and its audit event."""
    comment = Comment(
        id=new_id(),
        org_id=row.org_id,
        request_id=row.id,
        user_id=user_id,
        body=body,
        created_at=now,
    )
    data = {"comment_id": str(comment.id), "body": body}
    return comment, event(row, "comment.created", user_id, now, data)


def event(
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
