"""Approval requests and the votes cast on them."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import (
    Boolean,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    false,
    func,
    text,
    true,
)
from sqlalchemy.orm import Mapped, mapped_column

from signoff.common.ids import new_id
from signoff.common.time import utcnow
from signoff.models.base import Base, JSONType, only_on

# The hash of no arguments: SHA-256 of ``{}`` (RFC 8785), base64url without padding.
EMPTY_ARGUMENTS_HASH = "sha-256:RBNvo1WzZ4oRRq0W9-hknpT7T8If536DEMBg9hyq_4o"
DEFAULT_RECEIPT_TTL_SECONDS = 900

_FILTERS = ("status", "priority", "action_type", "source")
_FILTER_INDEX_COLUMNS = {
    column: ["org_id", column, "created_at", *(f for f in _FILTERS if f != column), "expires_at"]
    for column in _FILTERS
}


class ApprovalRequest(Base):
    __tablename__ = "approval_requests"
    __table_args__ = (
        # One request per idempotency key in an org (NULLs distinct: a create without a
        # key never conflicts). On PostgreSQL the index leads with the key, so the key's
        # lookup at create can use no index that leads with org_id (migration 0056). On
        # SQLite it holds keyed requests only, so a create without a key, the usual one,
        # writes no entry; the create's ``ON CONFLICT`` names its condition (0057).
        only_on(
            "sqlite",
            Index(
                "uq_approval_requests_org_id_idempotency_key",
                "org_id",
                "idempotency_key",
                unique=True,
                sqlite_where=text("idempotency_key IS NOT NULL"),
            ),
        ),
        only_on(
            "postgresql",
            Index(
                "uq_approval_requests_idempotency_key_org_id",
                "idempotency_key",
                "org_id",
                unique=True,
            ),
        ),
        # A request's number in its org (``#1234``): how people name it, and how a search
        # for the number finds it (migration 0024).
        Index("uq_approval_requests_org_number", "org_id", "number", unique=True),
        # List pages: newest first within an org, optionally narrowed by one filter.
        Index("ix_approval_requests_org_created", "org_id", "created_at", "id"),
        # Each filter's index also holds what the other filters test, so a page filtered
        # by two values tests both in the index (migration 0016).
        *(
            Index(f"ix_approval_requests_org_{column}_created", *columns)
            for column, columns in _FILTER_INDEX_COLUMNS.items()
        ),
        # Decided windows and the retention purge, each a range of ``decided_at``. On
        # SQLite only decided requests are in it, so a create writes no entry and a
        # decision adds one rather than moving one (migration 0054).
        Index(
            "ix_approval_requests_org_decided",
            "org_id",
            "decided_at",
            "status",
            "created_at",
            sqlite_where=text("decided_at IS NOT NULL"),
        ),
        # An approver's inbox: each priority's pending requests, oldest first. On SQLite
        # only pending requests are in it, so a decision removes its entry rather than
        # moving it to the new status (migration 0054).
        Index(
            "ix_approval_requests_org_status_priority_created",
            "org_id",
            "status",
            "priority",
            "created_at",
            "id",
            sqlite_where=text("status = 'pending'"),
        ),
        # The expiry sweep looks only at pending rows with a deadline.
        Index(
            "ix_approval_requests_pending_expiry",
            "expires_at",
            sqlite_where=text("status = 'pending' AND expires_at IS NOT NULL"),
            postgresql_where=text("status = 'pending' AND expires_at IS NOT NULL"),
        ),
    )

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=new_id)
    org_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("organizations.id", ondelete="CASCADE"))
    connection_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("connections.id"))
    title: Mapped[str] = mapped_column(Text)
    description: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(16), default="pending")
    priority: Mapped[str] = mapped_column(String(16))
    action_type: Mapped[str | None] = mapped_column(String(100), default=None)
    source: Mapped[str | None] = mapped_column(String(100), default=None)
    metadata_: Mapped[dict[str, Any]] = mapped_column("metadata", JSONType, default=dict)
    callback_url: Mapped[str | None] = mapped_column(Text, default=None)
    # Encrypted JSON object: headers often carry receivers' credentials.
    callback_headers_encrypted: Mapped[str | None] = mapped_column(Text, default=None)
    required_approvals: Mapped[int] = mapped_column(Integer, default=1)
    current_approvals: Mapped[int] = mapped_column(Integer, default=0)
    is_sequential: Mapped[bool] = mapped_column(Boolean, default=False)
    idempotency_key: Mapped[str | None] = mapped_column(String(255), default=None)
    expires_at: Mapped[datetime | None] = mapped_column(default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)
    decided_at: Mapped[datetime | None] = mapped_column(default=None)
    decided_by: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("users.id"), default=None)
    decided_by_name: Mapped[str | None] = mapped_column(String(200), default=None)
    decision_comment: Mapped[str | None] = mapped_column(Text, default=None)
    cancelled_at: Mapped[datetime | None] = mapped_column(default=None)
    comments_count: Mapped[int] = mapped_column(Integer, default=0)
    # Set while a chain is configured: reads and the inbox skip the steps table otherwise.
    has_steps: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    # Approved by a policy or a standing approval rather than by a person.
    auto_approved: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    # The request's number in its org, given by its create (``ApprovalRepository.
    # insert_unless_key_taken``): never shared by two requests of the org, never reused.
    number: Mapped[int] = mapped_column(Integer)
    # What the approver should look at ({"kind", "content"}) and its hash, which a
    # receipt can name (migration 0026).
    preview: Mapped[dict[str, Any] | None] = mapped_column(JSONType, default=None)
    preview_hash: Mapped[str | None] = mapped_column(String(64), default=None)
    # What the action will run with (a JSON object; null: none given, read as {}), the
    # JSON Schema it satisfies, and the SHA-256 of its RFC 8785 form (``receipts.hashing``)
    # that the receipt names.
    arguments: Mapped[dict[str, Any] | None] = mapped_column(JSONType, default=None)
    arguments_schema: Mapped[dict[str, Any] | None] = mapped_column(JSONType, default=None)
    arguments_hash: Mapped[str] = mapped_column(
        String(64), default=EMPTY_ARGUMENTS_HASH, server_default=EMPTY_ARGUMENTS_HASH
    )
    arguments_edited: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    # The arguments as the request was created with, and their hash, once an approver
    # edited them (migration 0027): the callback's patch and the page's diff start there.
    original_arguments: Mapped[dict[str, Any] | None] = mapped_column(JSONType, default=None)
    original_arguments_hash: Mapped[str | None] = mapped_column(String(64), default=None)
    # A policy rule asked that its decisions be signed with a passkey (docs/passkeys.md).
    passkey_required: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    # The standing approval that approved it at create (``policies.standing``); no
    # foreign key, as for its grantor: the id is what the audit names.
    standing_approval_id: Mapped[uuid.UUID | None] = mapped_column(default=None)
    # False only where the create wrote no notification plan row (SQLite, an org known to
    # have no channel): a decision then has no reminders to void (migration 0052).
    notifications_planned: Mapped[bool] = mapped_column(
        Boolean, default=True, server_default=true()
    )
    # How long the receipt its approval issues is valid.
    receipt_ttl_seconds: Mapped[int] = mapped_column(
        Integer,
        default=DEFAULT_RECEIPT_TTL_SECONDS,
        server_default=str(DEFAULT_RECEIPT_TTL_SECONDS),
    )


class Vote(Base):
    """One user's approve or reject on a request (count-based) or on one step of it."""

    __tablename__ = "votes"
    __table_args__ = (
        # A user counts once per count-based request: the database enforces it, so two
        # concurrent approvals by one user cannot both land.
        only_on(
            "postgresql",
            Index(
                "uq_votes_request_user_count_based",
                "request_id",
                "user_id",
                unique=True,
                postgresql_where=text("step_id IS NULL"),
            ),
        ),
        # SQLite: the same rule, and the request's votes found by it, in one index of
        # every vote (a step vote's third column is its step, unique by ``uq_votes_step_user``
        # anyway): each vote writes one entry fewer than with the partial index above and
        # ``ix_votes_request_created`` (migration 0058). It leads with ``request_id``, as the
        # reads of a request's votes and the deletes cascaded from a request need.
        only_on(
            "sqlite",
            Index(
                "uq_votes_request_user_step",
                "request_id",
                "user_id",
                func.coalesce(text("step_id"), text("''")),
                unique=True,
            ),
        ),
        # A step is voted once by each person: a person's step has one voter, a group's
        # step one vote per member (migration 0042).
        Index(
            "uq_votes_step_user",
            "step_id",
            "user_id",
            unique=True,
            sqlite_where=text("step_id IS NOT NULL"),
            postgresql_where=text("step_id IS NOT NULL"),
        ),
        # A group step's member counts once, whether they voted or their delegate did
        # for them (``on_behalf_of``; migration 0043).
        Index(
            "uq_votes_step_counted",
            "step_id",
            func.coalesce(text("on_behalf_of"), text("user_id")),
            unique=True,
            sqlite_where=text("step_id IS NOT NULL"),
            postgresql_where=text("step_id IS NOT NULL"),
        ),
        only_on("postgresql", Index("ix_votes_request_created", "request_id", "created_at")),
    )

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=new_id)
    request_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("approval_requests.id", ondelete="CASCADE")
    )
    step_id: Mapped[uuid.UUID | None] = mapped_column(default=None)
    user_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("users.id"))
    # The away member of a group step's group this vote was cast for by their delegate
    # (``user_id``): it counts as theirs. None: the voter's own vote.
    on_behalf_of: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("users.id"), default=None)
    decision: Mapped[str] = mapped_column(String(16))
    comment: Mapped[str | None] = mapped_column(Text, default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class ApprovalStep(Base):
    """One link of an approval chain: a named approver, voted once; or a group, approved
    once ``required_approvals`` distinct active members approved it (a quorum)."""

    __tablename__ = "approval_steps"
    __table_args__ = (
        UniqueConstraint("request_id", "step_order"),
        # The approver's inbox: their pending steps.
        Index("ix_approval_steps_approver_status", "approver_id", "status"),
        # A group member's inbox: the pending steps of their groups. On SQLite it holds
        # group steps only: a person's step writes no entry (migration 0059).
        Index(
            "ix_approval_steps_group_status",
            "group_id",
            "status",
            sqlite_where=text("group_id IS NOT NULL"),
        ),
    )

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=new_id)
    request_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("approval_requests.id", ondelete="CASCADE")
    )
    step_order: Mapped[int] = mapped_column(Integer)
    # Exactly one of these two names who decides the step.
    approver_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("users.id"), default=None)
    status: Mapped[str] = mapped_column(String(16), default="pending")
    decided_at: Mapped[datetime | None] = mapped_column(default=None)
    decided_by: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("users.id"), default=None)
    comment: Mapped[str | None] = mapped_column(Text, default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    group_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("groups.id", ondelete="SET NULL"), default=None
    )
    # A group step's quorum and the distinct members' approvals so far (a person's: 1).
    required_approvals: Mapped[int] = mapped_column(Integer, default=1, server_default="1")
    current_approvals: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
