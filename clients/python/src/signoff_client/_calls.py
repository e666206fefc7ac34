"""The API calls, described once for both clients.

``SignoffClient`` and ``AsyncSignoffClient`` differ only in how they send a ``Call`` and
sleep; what each method sends, how its answer is read, and when a failure may be retried
live here, so the two cannot drift apart.
"""

from __future__ import annotations

import math
import random
import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, TypeVar
from urllib.parse import quote

import httpx
from joserfc.jwk import KeySet

from signoff_client._errors import (
    APIError,
    EmergencyStop,
    ServerError,
    ValidationError,
    error_for,
)
from signoff_client._models import (
    Approval,
    ApprovalPage,
    AuditEvent,
    Comment,
    Redemption,
    Step,
    StepVote,
)
from signoff_client._receipts import key_set

T = TypeVar("T")

API = "/api/v1"
JWKS_PATH = "/.well-known/jwks.json"
# The longest ``?wait=`` signoff accepts by default; lowered when a server says less.
DEFAULT_LONG_POLL_SECONDS = 60.0
LIST_PAGE_SIZE = 100
_WAIT_LIMIT = re.compile(r"between 0 and (\d+(?:\.\d+)?)")


@dataclass(frozen=True)
class RetryPolicy:
    """Retries of network errors and 5xx answers, with exponential backoff and jitter.

    A call is retried after it may have reached the server only when repeating it is
    harmless (reads, a create with an idempotency key, replacing a chain). Any call is
    retried when the connection could not even be opened, since nothing was sent.
    """

    max_retries: int = 3
    backoff_seconds: float = 0.5
    max_backoff_seconds: float = 8.0

    def delay(self, attempt: int) -> float:
        """Seconds before retry ``attempt`` (1-based): 0.5, 1, 2, ... with +-25 % jitter."""
        base = min(self.max_backoff_seconds, self.backoff_seconds * 2.0 ** (attempt - 1))
        return base * random.uniform(0.75, 1.25)  # noqa: S311 - jitter, not security


NO_RETRIES = RetryPolicy(max_retries=0)


@dataclass(frozen=True)
class Call(Generic[T]):
    method: str
    path: str
    parse: Callable[[Any], T]
    json: dict[str, Any] | None = None
    params: dict[str, str] = field(default_factory=dict)
    # Safe to send again after it may have reached the server.
    idempotent: bool = False
    # Added to the read timeout: how long the server may hold the answer (long polls).
    hold_seconds: float = 0.0


def _id(value: str) -> str:
    return quote(str(value), safe="")


def _timestamp(value: datetime | str) -> str:
    return value.isoformat() if isinstance(value, datetime) else value


def _without_none(values: Mapping[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in values.items() if value is not None}


def new_idempotency_key() -> str:
    return f"signoff-client-{uuid.uuid4()}"


# ---- the calls ----


def create_approval(
    title: str,
    description: str,
    priority: str,
    *,
    action_type: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    callback_url: str | None = None,
    callback_headers: Mapping[str, str] | None = None,
    expires_at: datetime | str | None = None,
    required_approvals: int | None = None,
    idempotency_key: str | bool | None = None,
    source: str | None = None,
    is_sequential: bool | None = None,
    arguments: Mapping[str, Any] | None = None,
    arguments_schema: Mapping[str, Any] | None = None,
    preview: Mapping[str, Any] | None = None,
    receipt_ttl_seconds: int | None = None,
) -> Call[Approval]:
    if idempotency_key is True:
        idempotency_key = new_idempotency_key()
    key = idempotency_key or None
    body = _without_none(
        {
            "title": title,
            "description": description,
            "priority": priority,
            "action_type": action_type,
            "metadata": dict(metadata) if metadata is not None else None,
            "callback_url": callback_url,
            "callback_headers": dict(callback_headers) if callback_headers is not None else None,
            "expires_at": _timestamp(expires_at) if expires_at is not None else None,
            "required_approvals": required_approvals,
            "idempotency_key": key,
            "source": source,
            "is_sequential": is_sequential,
            "arguments": _object(arguments),
            "arguments_schema": _object(arguments_schema),
            "preview": _object(preview),
            "receipt_ttl_seconds": receipt_ttl_seconds,
        }
    )
    # A repeated create with the same key answers with the first request: safe to resend.
    return Call("POST", f"{API}/approvals", Approval.model_validate, body, idempotent=bool(key))


def get_approval(approval_id: str, wait: float | None = None) -> Call[Approval]:
    params = {"wait": _seconds(wait)} if wait else {}
    return Call(
        "GET",
        f"{API}/approvals/{_id(approval_id)}",
        Approval.model_validate,
        params=params,
        idempotent=True,
        hold_seconds=wait or 0.0,
    )


def list_page(filters: Mapping[str, Any], page: int) -> Call[ApprovalPage]:
    params = {name: _query_value(value) for name, value in filters.items() if value is not None}
    params.setdefault("page_size", str(LIST_PAGE_SIZE))
    params["page"] = str(page)
    return Call(
        "GET", f"{API}/approvals", ApprovalPage.model_validate, params=params, idempotent=True
    )


def decide(
    approval_id: str,
    decision: str,
    comment: str | None = None,
    source: str | None = None,
    arguments: Mapping[str, Any] | None = None,
) -> Call[Approval]:
    body = _without_none(
        {
            "decision": decision,
            "comment": comment,
            "source": source,
            "arguments": _object(arguments),
        }
    )
    return Call("PATCH", f"{API}/approvals/{_id(approval_id)}", Approval.model_validate, body)


def cancel(approval_id: str) -> Call[Approval]:
    return Call("DELETE", f"{API}/approvals/{_id(approval_id)}", Approval.model_validate)


def add_comment(approval_id: str, body: str) -> Call[Comment]:
    path = f"{API}/approvals/{_id(approval_id)}/comments"
    return Call("POST", path, Comment.model_validate, {"body": body})


def list_comments(approval_id: str) -> Call[list[Comment]]:
    path = f"{API}/approvals/{_id(approval_id)}/comments"
    return Call("GET", path, _data_of(Comment), idempotent=True)


def list_events(approval_id: str) -> Call[list[AuditEvent]]:
    path = f"{API}/approvals/{_id(approval_id)}/events"
    return Call("GET", path, _data_of(AuditEvent), idempotent=True)


def list_steps(approval_id: str) -> Call[list[Step]]:
    path = f"{API}/approvals/{_id(approval_id)}/steps"
    return Call("GET", path, _data_of(Step), idempotent=True)


def set_steps(approval_id: str, steps: Sequence[str | Mapping[str, Any]]) -> Call[list[Step]]:
    """``steps``: approver ids in chain order, or ``{"approver_id", "step_order"}`` dicts
    (or ``{"group_id", "required_approvals", "step_order"}`` for a group's step)."""
    body = {"steps": [_step(index, step) for index, step in enumerate(steps, start=1)]}
    path = f"{API}/approvals/{_id(approval_id)}/steps"
    # The chain is replaced whole, so sending the same chain twice leaves the same chain.
    return Call("POST", path, _data_of(Step), body, idempotent=True)


def vote_step(
    approval_id: str,
    step_id: str,
    decision: str,
    comment: str | None = None,
    arguments: Mapping[str, Any] | None = None,
) -> Call[StepVote]:
    path = f"{API}/approvals/{_id(approval_id)}/steps/{_id(step_id)}"
    body = _without_none(
        {"decision": decision, "comment": comment, "arguments": _object(arguments)}
    )
    return Call("PATCH", path, StepVote.model_validate, body)


def me() -> Call[dict[str, Any]]:
    """Who the credentials are: their org, connection, user, role and scopes."""
    return Call("GET", f"{API}/me", dict, idempotent=True)


def jwks() -> Call[KeySet]:
    """The server's public receipt keys (public, outside the API's prefix)."""
    return Call("GET", JWKS_PATH, key_set, idempotent=True)


def redeem_receipt(token: str, arguments: Mapping[str, Any] | None = None) -> Call[Redemption]:
    body: dict[str, Any] = {"receipt": token}
    if arguments is not None:
        body["arguments"] = dict(arguments)
    # Never resent after it may have reached the server: a redeem spends a use.
    return Call("POST", f"{API}/receipts/redeem", Redemption.model_validate, body)


def _object(value: Mapping[str, Any] | None) -> dict[str, Any] | None:
    return dict(value) if value is not None else None


def _step(position: int, step: str | Mapping[str, Any]) -> dict[str, Any]:
    if isinstance(step, str):
        return {"approver_id": step, "step_order": position}
    keys = ("approver_id", "group_id", "required_approvals")
    return {key: step[key] for key in keys if key in step} | {
        "step_order": step.get("step_order", position)
    }


def _data_of(model: Callable[[Any], T] | type[Any]) -> Callable[[Any], list[Any]]:
    validate = getattr(model, "model_validate", model)

    def parse(body: Any) -> list[Any]:
        return [validate(item) for item in body["data"]]

    return parse


def _query_value(value: Any) -> str:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple, set, frozenset)):
        return ",".join(str(item) for item in value)
    return str(value)


def _seconds(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:.1f}"


# ---- answers and retries ----


def parse_answer(call: Call[T], response: httpx.Response) -> T:
    """The call's result, or the typed error the answer carries."""
    if response.is_success:
        return call.parse(response.json())
    try:
        body = response.json()
    except ValueError:
        body = None
    raise error_for(response.status_code, body, response.headers)


def retry_delay(
    call: Call[Any], policy: RetryPolicy, attempt: int, failure: BaseException
) -> float | None:
    """Seconds to wait before sending ``call`` again after ``failure``, or None to give up."""
    if attempt > policy.max_retries:
        return None
    if isinstance(failure, (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)):
        return policy.delay(attempt)  # nothing reached the server
    if isinstance(failure, httpx.TransportError) and call.idempotent:
        return policy.delay(attempt)
    if isinstance(failure, ServerError) and not isinstance(failure, EmergencyStop):
        # An emergency stop is an operator's decision, not an outage: it is not retried.
        return policy.delay(attempt) if call.idempotent else None
    return None


def long_poll_limit(error: APIError) -> float | None:
    """The server's longest ``?wait=``, when it refused ours as too long."""
    if not isinstance(error, ValidationError):
        return None
    for item in error.fields:
        if item.get("field") == "wait":
            match = _WAIT_LIMIT.search(item.get("message", ""))
            return float(match.group(1)) if match else 0.0
    return None


def read_timeout(base: httpx.Timeout, hold_seconds: float) -> httpx.Timeout:
    if not hold_seconds:
        return base
    read = (base.read or 0.0) + math.ceil(hold_seconds)
    return httpx.Timeout(connect=base.connect, read=read, write=base.write, pool=base.pool)
