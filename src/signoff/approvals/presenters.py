"""Rows to the JSON the API answers with (decisions.md sections 10 and 13).

Built as plain dicts and rendered with orjson: the answer shapes are documented by the
models in schemas.py, but a hot read path need not run them through validation again.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from signoff.approvals.record import RequestRecord
from signoff.approvals.state import is_past_expiry
from signoff.common.time import format_timestamp
from signoff.models import ApprovalStep, AuditEvent, Comment, Vote


def request_to_dict(row: RequestRecord, now: datetime) -> dict[str, Any]:
    """The whole request as every read shows it; ``callback_headers`` is never echoed.

    A pending request past its deadline reads as expired (decided at its deadline) even
    before the sweep has written that down, so every reader sees one truth.

    List pages get the same object from the database (``rendered.request_json``): a change
    here is a change there, and ``tests/api/test_rendered.py`` fails until both agree.
    """
    status = row.status
    decided_at = row.decided_at
    if status == "pending" and is_past_expiry(row.expires_at, now):
        status, decided_at = "expired", row.expires_at
    return {
        "id": str(row.id),
        "org_id": str(row.org_id),
        "connection_id": str(row.connection_id),
        "title": row.title,
        "description": row.description,
        "status": status,
        "priority": row.priority,
        "action_type": row.action_type,
        "source": row.source,
        "metadata": row.metadata_ or {},
        "callback_url": row.callback_url,
        "required_approvals": row.required_approvals,
        "current_approvals": row.current_approvals,
        "is_sequential": row.is_sequential,
        "idempotency_key": row.idempotency_key,
        "created_at": format_timestamp(row.created_at),
        "updated_at": format_timestamp(row.updated_at),
        "expires_at": format_timestamp(row.expires_at),
        "decided_at": format_timestamp(decided_at),
        "decided_by": str(row.decided_by) if row.decided_by else None,
        "decided_by_name": row.decided_by_name,
        "decision_comment": row.decision_comment,
        "cancelled_at": format_timestamp(row.cancelled_at),
        "comments_count": row.comments_count,
    }


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


def step_to_dict(row: ApprovalStep) -> dict[str, Any]:
    return {
        "id": str(row.id),
        "approval_request_id": str(row.request_id),
        "step_order": row.step_order,
        "approver_id": str(row.approver_id),
        "status": row.status,
        "decided_at": format_timestamp(row.decided_at),
        "decided_by": str(row.decided_by) if row.decided_by else None,
        "comment": row.comment,
    }


def vote_to_dict(row: Vote) -> dict[str, Any]:
    return {
        "id": str(row.id),
        "user_id": str(row.user_id),
        "step_id": str(row.step_id) if row.step_id else None,
        "decision": row.decision,
        "comment": row.comment,
        "created_at": format_timestamp(row.created_at),
    }
