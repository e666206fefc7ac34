"""Rows to the JSON the API answers with (decisions.md sections 10 and 13).

Built as plain dicts and rendered with orjson: the answer shapes are documented by the
models in schemas.py, but a hot read path need not run them through validation again.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from signoff.approvals.json_fields import REQUEST_FIELDS
from signoff.approvals.state import is_past_expiry
from signoff.approvals.typed_rows import RequestRecord, StepRecord, VoteRecord
from signoff.common.time import format_timestamp
from signoff.models import AuditEvent, Comment


def _as_id(value: Any) -> str | None:
    return str(value) if value is not None else None


def _as_object(value: Any) -> Any:
    return value or {}


# How each kind of value becomes JSON (None: as it is); see json_fields.Kind.
_CONVERT: dict[str, Callable[[Any], Any] | None] = {
    "id": _as_id,
    "time": format_timestamp,
    "flag": None,
    "object": _as_object,
    "json": None,
    "plain": None,
}
# Each key of the answer, the index of its value in a RequestRecord, and its conversion.
_PLAN = tuple(
    (f.key, RequestRecord._fields.index(f.source), _CONVERT[f.kind]) for f in REQUEST_FIELDS
)
_WHEN_EXPIRED = {f.when_expired: f.key for f in REQUEST_FIELDS if f.when_expired}


def request_to_dict(row: RequestRecord, now: datetime) -> dict[str, Any]:
    """The whole request as every read shows it (``json_fields.REQUEST_FIELDS``);
    ``callback_headers`` is never echoed.

    A pending request past its deadline reads as expired (decided at its deadline) even
    before the sweep has written that down, so every reader sees one truth.

    List pages get the same object from the database (``json_in_sql.request_json``), from
    the same declaration; ``tests/approvals/test_json_in_sql.py`` checks both agree.
    """
    body = {
        key: row[index] if convert is None else convert(row[index]) for key, index, convert in _PLAN
    }
    if row.status == "pending" and is_past_expiry(row.expires_at, now):
        body[_WHEN_EXPIRED["status"]] = "expired"
        body[_WHEN_EXPIRED["deadline"]] = format_timestamp(row.expires_at)
    return body


def comment_to_dict(row: Comment) -> dict[str, Any]:
    request_id = str(row.request_id)
    return {
        "id": str(row.id),
        "approval_request_id": request_id,
        "request_id": request_id,
        "user_id": str(row.user_id),
        "body": row.body,
        "created_at": format_timestamp(row.created_at),
    }


def event_to_dict(row: AuditEvent) -> dict[str, Any]:
    return {
        "id": str(row.id),
        "request_id": str(row.request_id),
        "type": row.type,
        "actor_id": str(row.actor_id) if row.actor_id else None,
        "data": row.data or {},
        "created_at": format_timestamp(row.created_at),
    }


def pagination(page: int, page_size: int, total: int) -> dict[str, int]:
    return {
        "page": page,
        "page_size": page_size,
        "total": total,
        "total_pages": (total + page_size - 1) // page_size,
    }


def step_to_dict(
    row: StepRecord, group_names: Mapping[uuid.UUID, str] | None = None
) -> dict[str, Any]:
    """A step as the API answers it; a group's step also names its group and quorum
    (``group_names``: the names of the chain's groups)."""
    answer = {
        "id": str(row.id),
        "approval_request_id": str(row.request_id),
        "step_order": row.step_order,
        "approver_id": str(row.approver_id) if row.approver_id else None,
        "status": row.status,
        "decided_at": format_timestamp(row.decided_at),
        "decided_by": str(row.decided_by) if row.decided_by else None,
        "comment": row.comment,
    }
    return answer | group_step_fields(row, group_names)


def group_step_fields(
    row: StepRecord, group_names: Mapping[uuid.UUID, str] | None
) -> dict[str, Any]:
    """A group step's group and quorum, as answers show them (none for a person's)."""
    if row.group_id is None:
        return {}
    return {
        "group_id": str(row.group_id),
        "group_name": (group_names or {}).get(row.group_id),
        "required_approvals": row.required_approvals,
        "current_approvals": row.current_approvals,
    }


def vote_to_dict(row: VoteRecord) -> dict[str, Any]:
    return {
        "id": str(row.id),
        "user_id": str(row.user_id),
        "step_id": str(row.step_id) if row.step_id else None,
        "decision": row.decision,
        "comment": row.comment,
        "created_at": format_timestamp(row.created_at),
    }
