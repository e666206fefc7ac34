"""Typed rows: ``RequestRecord``, the one form a request has on its way through the code,
and the step and vote records.

Every read of a request (the get, the lock a writer takes, the sweep's batch, a new row
as written, an idempotent replay) answers this typed, immutable record; a write answers
a new record with what it changed (``record._replace``). Prepared statements build it
straight from their rows: its fields are the columns they select, in order
(``REQUEST_COLUMNS``).
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import Label

from signoff.models import ApprovalRequest


class RequestRecord(NamedTuple):
    id: uuid.UUID
    org_id: uuid.UUID
    connection_id: uuid.UUID
    title: str
    description: str
    status: str
    priority: str
    action_type: str | None
    source: str | None
    metadata_: dict[str, Any]
    callback_url: str | None
    callback_headers_encrypted: str | None
    required_approvals: int
    current_approvals: int
    is_sequential: bool
    idempotency_key: str | None
    expires_at: datetime | None
    created_at: datetime
    updated_at: datetime
    decided_at: datetime | None
    decided_by: uuid.UUID | None
    decided_by_name: str | None
    decision_comment: str | None
    cancelled_at: datetime | None
    comments_count: int
    has_steps: bool
    auto_approved: bool
    number: int
    preview: dict[str, Any] | None
    preview_hash: str | None
    arguments: dict[str, Any] | None
    arguments_schema: dict[str, Any] | None
    arguments_hash: str
    arguments_edited: bool
    receipt_ttl_seconds: int
    original_arguments: dict[str, Any] | None
    original_arguments_hash: str | None
    passkey_required: bool = False
    standing_approval_id: uuid.UUID | None = None
    notifications_planned: bool = True


class StepRecord(NamedTuple):
    """A step of a request's chain, as every read answers it."""

    id: uuid.UUID
    request_id: uuid.UUID
    step_order: int
    approver_id: uuid.UUID | None
    status: str
    decided_at: datetime | None
    decided_by: uuid.UUID | None
    comment: str | None
    created_at: datetime
    group_id: uuid.UUID | None = None
    required_approvals: int = 1
    current_approvals: int = 0


class VoteRecord(NamedTuple):
    """A vote on a request (count-based) or on one of its steps."""

    id: uuid.UUID
    request_id: uuid.UUID
    step_id: uuid.UUID | None
    user_id: uuid.UUID
    decision: str
    comment: str | None
    created_at: datetime
    # The away member a delegate cast it for (a group step); None: the voter's own.
    on_behalf_of: uuid.UUID | None = None


def columns_of(entity: type[Any], record: type[tuple[Any, ...]]) -> list[Label[Any]]:
    """The columns of ``entity`` a record is read with, labelled as its fields, in order."""
    return [getattr(entity, name).label(name) for name in record._fields]  # type: ignore[attr-defined]


def request_columns() -> list[Label[Any]]:
    """The columns a request is read with, labelled as ``RequestRecord``'s fields."""
    return columns_of(ApprovalRequest, RequestRecord)


# A column's name where it differs from the record's field (``metadata`` is taken by
# SQLAlchemy's declarative base), and the other way round.
COLUMN_OF_FIELD = {"metadata_": "metadata"}
FIELD_OF_COLUMN = {column: field for field, column in COLUMN_OF_FIELD.items()}


# Every column of the table, by its name: what a new request's insert writes.
COLUMNS = tuple(COLUMN_OF_FIELD.get(name, name) for name in RequestRecord._fields)


def _scalar_default(column: str) -> Any:
    default = ApprovalRequest.__table__.c[column].default
    return default.arg if default is not None and default.is_scalar else None


# What a create leaves to the table's defaults: a column added with a constant default
# needs no change to the create.
_DEFAULTS = {column: _scalar_default(column) for column in COLUMNS}


def new_row(values: dict[str, Any]) -> dict[str, Any]:
    """Every column of a new request: ``values`` (by column), the rest their defaults."""
    return {**_DEFAULTS, **values}


def record_written(row: dict[str, Any]) -> RequestRecord:
    """A new row as it was written (``new_row``), as a record."""
    return RequestRecord(*(row[column] for column in COLUMNS))
