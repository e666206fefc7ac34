"""What the API answers with, as Pydantic models.

Lenient on purpose: unknown fields are kept (``model_extra``) rather than refused, and
every field beyond the few the interface guarantees has a default, so a newer server
(or an older one) does not break an installed client.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Priority = Literal["low", "medium", "high", "critical"]
Decision = Literal["approve", "reject"]
FINAL_STATUSES = frozenset({"approved", "rejected", "cancelled", "expired"})


class _Model(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)


class Step(_Model):
    """One step of an approval chain."""

    id: str
    step_order: int
    approver_id: str | None = None  # None: a group's step
    status: str = "pending"
    approval_request_id: str | None = None
    decided_at: datetime | None = None
    decided_by: str | None = None
    comment: str | None = None
    # A group's step (a quorum of its members) only.
    group_id: str | None = None
    group_name: str | None = None
    required_approvals: int | None = None
    current_approvals: int | None = None


class Vote(_Model):
    id: str
    user_id: str
    decision: str
    step_id: str | None = None
    comment: str | None = None
    created_at: datetime | None = None


class Approval(_Model):
    """An approval request. Decide and cancel answers add ``callback_delivered``."""

    id: str
    title: str
    status: str
    priority: str
    created_at: datetime
    # Its number in the organization, as people name it (``#1234``); None from a server
    # that does not number requests yet.
    number: int | None = None
    description: str = ""
    org_id: str | None = None
    connection_id: str | None = None
    action_type: str | None = None
    source: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    callback_url: str | None = None
    required_approvals: int = 1
    current_approvals: int = 0
    is_sequential: bool = False
    idempotency_key: str | None = None
    updated_at: datetime | None = None
    expires_at: datetime | None = None
    decided_at: datetime | None = None
    decided_by: str | None = None
    decided_by_name: str | None = None
    decision_comment: str | None = None
    cancelled_at: datetime | None = None
    comments_count: int | None = None
    steps: list[Step] | None = None
    votes: list[Vote] | None = None
    callback_delivered: bool | None = None
    # What will run, and what was approved to run. A server without receipts sends none
    # of these: ``arguments`` is then None and ``receipt_issued`` False.
    arguments: dict[str, Any] | None = None
    arguments_schema: dict[str, Any] | None = None
    arguments_hash: str | None = None
    arguments_edited: bool = False
    preview: dict[str, Any] | None = None
    # The signed receipt (a compact JWS), once approved, for the creating connection and
    # admins; other members only see ``receipt_issued``.
    receipt: str | None = None
    receipt_issued: bool = False
    receipt_uses: int | None = None

    @property
    def is_final(self) -> bool:
        """True once the request has left pending; nothing changes it after that."""
        return self.status in FINAL_STATUSES

    @property
    def is_approved(self) -> bool:
        return self.status == "approved"


class StepVote(Step):
    """The answer to a step vote: the step, and where its request stands now."""

    request_status: str = "pending"
    current_approvals: int = 0
    required_approvals: int = 1
    callback_delivered: bool = False


class Comment(_Model):
    id: str
    body: str
    user_id: str
    created_at: datetime
    approval_request_id: str | None = None
    request_id: str | None = None


class AuditEvent(_Model):
    """One entry of a request's audit trail (creation, votes, comments, deliveries...)."""

    id: str
    type: str
    created_at: datetime
    request_id: str | None = None
    actor_id: str | None = None
    data: dict[str, Any] = Field(default_factory=dict)


class Redemption(_Model):
    """A receipt redeemed: ``uses_left`` more redeems are allowed (0 for a single use)."""

    request_id: str
    jti: str
    uses_left: int
    redeemed_at: datetime


class Pagination(_Model):
    page: int
    page_size: int
    total: int
    total_pages: int


class ApprovalPage(_Model):
    data: list[Approval]
    pagination: Pagination
