"""An in-memory unit of work (fakes, not mocks, in the style of Cosmic Python): it keeps
what applying a transition writes, so effects are tested without a database."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from signoff.approvals.repository import NewEvent, NewVote
from signoff.approvals.typed_rows import RequestRecord
from signoff.models import ApprovalStep, Comment
from signoff.models.approvals import EMPTY_ARGUMENTS_HASH
from signoff.unit_of_work import RequestChange
from signoff.webhooks.service import DecisionFacts

NOW = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)


def pending_request(**fields: Any) -> RequestRecord:
    values: dict[str, Any] = {
        "id": uuid.uuid4(),
        "org_id": uuid.uuid4(),
        "connection_id": uuid.uuid4(),
        "title": "Deploy",
        "description": "Roll out",
        "status": "pending",
        "priority": "high",
        "action_type": "deploy.prod",
        "source": None,
        "metadata_": {"ticket": 7},
        "callback_url": None,
        "callback_headers_encrypted": None,
        "required_approvals": 1,
        "current_approvals": 0,
        "is_sequential": False,
        "idempotency_key": None,
        "expires_at": None,
        "created_at": NOW,
        "updated_at": NOW,
        "decided_at": None,
        "decided_by": None,
        "decided_by_name": None,
        "decision_comment": None,
        "cancelled_at": None,
        "comments_count": 0,
        "has_steps": False,
        "auto_approved": False,
        "number": 1,
        "preview": None,
        "preview_hash": None,
        "arguments": None,
        "arguments_schema": None,
        "arguments_hash": EMPTY_ARGUMENTS_HASH,
        "arguments_edited": False,
        "receipt_ttl_seconds": 900,
        "original_arguments": None,
        "original_arguments_hash": None,
    }
    values.update(fields)
    return RequestRecord(**values)


@dataclass
class FakeApprovals:
    rows: dict[uuid.UUID, dict[str, Any]] = field(default_factory=dict)
    votes: list[NewVote] = field(default_factory=list)
    step_updates: list[tuple[uuid.UUID, str, uuid.UUID | None]] = field(default_factory=list)
    steps: dict[uuid.UUID, list[ApprovalStep]] = field(default_factory=dict)
    comments: list[Comment] = field(default_factory=list)
    events: list[NewEvent] = field(default_factory=list)
    flushes: int = 0
    # Creates: the rows inserted, and the idempotency keys taken (by org).
    inserted: list[RequestRecord] = field(default_factory=list)
    keys: set[tuple[uuid.UUID, str]] = field(default_factory=set)
    can_write_plan_with_insert: bool = False
    writes_at_once: bool = False

    async def insert_unless_key_taken(
        self,
        row: dict[str, Any],
        record: RequestRecord,
        event: NewEvent,
        check: Any = None,
        *,
        then: Sequence[NewEvent] = (),
        standing: Any = None,
    ) -> RequestRecord | None:
        key = row.get("idempotency_key")
        if key is not None:
            if (row["org_id"], key) in self.keys:
                return None
            self.keys.add((row["org_id"], key))
        self.inserted.append(record)
        self.events.extend((event, *then))
        return record

    async def update_if_pending(
        self, request_id: uuid.UUID, values: dict[str, Any], refusal: Callable[[], Exception]
    ) -> None:
        row = self.rows.setdefault(request_id, {"status": "pending"})
        if row["status"] != "pending":
            raise refusal()
        row.update(values)

    async def update_many_if_pending(self, changes: Any) -> int:
        changed = 0
        for request_id, values in changes:
            row = self.rows.setdefault(request_id, {"status": "pending"})
            if row["status"] == "pending":
                row.update(values)
                changed += 1
        return changed

    async def add_vote(self, vote: NewVote) -> None:
        self.votes.append(vote)

    async def delete_votes(self, request_id: uuid.UUID) -> None:
        self.votes = [vote for vote in self.votes if vote.request_id != request_id]

    async def update_step(
        self,
        step_id: uuid.UUID,
        *,
        status: str,
        decided_at: datetime,
        decided_by: uuid.UUID | None,
        comment: str | None,
    ) -> None:
        self.step_updates.append((step_id, status, decided_by))

    async def replace_steps(self, request_id: uuid.UUID, steps: Any, *, replacing: bool) -> None:
        self.steps[request_id] = list(steps)

    async def add_comment(self, comment: Comment) -> None:
        self.comments.append(comment)

    async def add_event(self, event: NewEvent) -> None:
        self.events.append(event)

    async def add_events(self, events: Any) -> None:
        self.events.extend(events)

    async def flush(self) -> None:
        self.flushes += 1


@dataclass
class FakeCallbacks:
    sent: list[DecisionFacts] = field(default_factory=list)

    async def enqueue(self, facts: DecisionFacts, now: datetime) -> None:
        self.sent.append(facts)

    async def enqueue_many(self, facts: Any, now: datetime) -> None:
        self.sent.extend(facts)


@dataclass
class FakeNotifications:
    steps_opened_for: list[uuid.UUID] = field(default_factory=list)
    # The approvers told, per opening.
    opened_approvers: list[tuple[uuid.UUID, ...]] = field(default_factory=list)
    stopped_for: list[uuid.UUID] = field(default_factory=list)
    created_for: list[uuid.UUID] = field(default_factory=list)
    # Whom an edit asked again, per edit.
    asked_again_for: list[tuple[uuid.UUID, ...]] = field(default_factory=list)

    async def request_created(self, request: RequestRecord, now: datetime) -> None:
        self.created_for.append(request.id)

    async def steps_opened(self, request: RequestRecord, approver_ids: Any, now: datetime) -> None:
        self.steps_opened_for.append(request.id)
        self.opened_approvers.append(tuple(approver_ids))

    async def asked_again(self, request: RequestRecord, user_ids: Any, now: datetime) -> None:
        self.asked_again_for.append(tuple(user_ids))

    async def left_pending(self, request_id: uuid.UUID, now: datetime) -> None:
        self.stopped_for.append(request_id)

    async def left_pending_many(self, request_ids: Any, now: datetime) -> None:
        self.stopped_for.extend(request_ids)


@dataclass
class FakeReceipts:
    """Receipts issued, as (request id, approvers); each answers a stand-in token."""

    issued: list[tuple[uuid.UUID, tuple[uuid.UUID, ...]]] = field(default_factory=list)

    async def issue(self, request: RequestRecord, decided_by: Any, now: datetime) -> str:
        self.issued.append((request.id, tuple(decided_by)))
        return f"receipt-of-{request.id}"


@dataclass
class FakeUnitOfWork:
    approvals: FakeApprovals = field(default_factory=FakeApprovals)
    callbacks: FakeCallbacks = field(default_factory=FakeCallbacks)
    notifications: FakeNotifications = field(default_factory=FakeNotifications)
    receipts: FakeReceipts = field(default_factory=FakeReceipts)
    changes: list[RequestChange] = field(default_factory=list)

    def request_changed(self, org_id: uuid.UUID, request_id: uuid.UUID, *, final: bool) -> None:
        self.changes.append(RequestChange(org_id, request_id, final))

    @property
    def event_types(self) -> list[str]:
        return [event.type for event in self.approvals.events]
