"""``tasks/get`` on ``/mcp`` answered before the SDK: a task poll is one indexed read.

Through the SDK a poll costs a per-request server task, the JSON-RPC dispatcher and then
an in-process ``GET /api/v1/approvals/:id`` that passes the API guard a second time:
many times what the API's own read costs, for the one call an MCP client makes over and
over. Here the body is read, and a lone ``tasks/get`` at the tasks revision is answered
with one read of the request, scoped to the caller's org, under the same scope
(``approvals:read``) as that API read; anything else goes on to the SDK untouched, with
its body replayed.

The task it answers is the one the SDK path answers (``signoff_client.mcp_tasks``), so
both give the same states and messages, and the same tasks: a connection's own, or any
of the org's for an admin's credentials (``visible``).

The API guard answers a poll it found itself (``answer``), without the app's routing,
once the SDK is loaded (the first ``/mcp`` call loads it). ``SIGNOFF_STOCK_TASK_POLL=1``
in the environment of ``signoff serve`` turns this path off: every ``tasks/get`` goes
through the SDK (a measurement switch, docs/performance.md).
"""

from __future__ import annotations

import os
import sys
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson
from starlette.requests import Request
from starlette.types import Message, Receive, Scope, Send

from signoff.approvals import service
from signoff.approvals.repository import ApprovalReads
from signoff.approvals.state import is_past_expiry
from signoff.approvals.typed_rows import RequestRecord
from signoff.auth.principal import Principal
from signoff.common.http import principal_check_of, principal_with_scope
from signoff.common.time import utcnow
from signoff.context import context_of
from signoff.errors import AppError, NotFound

TASKS_VERSION = "2025-11-25"
PROTOCOL_HEADER = b"mcp-protocol-version"
# A tasks/get is a few hundred bytes; a larger body is not one, and goes to the SDK.
MAX_POLL_BODY = 2048
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
# Where the API guard leaves, in ``/mcp``'s scope state, the poll it found and guarded.
POLL = "task_poll"
STOCK_SWITCH = "SIGNOFF_STOCK_TASK_POLL"
# Read once, at import: the switch is for measurement, set when the server starts.
ENABLED = os.environ.get(STOCK_SWITCH) != "1"
# What ``task_of`` comes from: loaded with the SDK, by the first ``/mcp`` call.
TASKS_MODULE = "signoff_client.mcp_tasks"


@dataclass(frozen=True)
class Poll:
    rpc_id: str | int
    task_id: uuid.UUID


def may_be_poll(scope: Scope) -> bool:
    """A small POST at the tasks revision (the header names it on every call after
    initialize); read before the body limit applies, so its length must be declared."""
    if not ENABLED or scope["method"] != "POST":
        return False
    revision = length = None
    for name, value in scope["headers"]:
        if name == PROTOCOL_HEADER:
            revision = value
        elif name == b"content-length":
            length = value
    if revision != TASKS_VERSION.encode() or length is None or not length.isdigit():
        return False
    return int(length) <= MAX_POLL_BODY


async def read_body(receive: Receive) -> tuple[bytes, list[Message]]:
    """The whole body, and the messages it came in (to replay them to the SDK)."""
    messages: list[Message] = []
    chunks: list[bytes] = []
    while True:
        message = await receive()
        messages.append(message)
        chunks.append(message.get("body", b""))
        if message["type"] != "http.request" or not message.get("more_body", False):
            return b"".join(chunks), messages


def replaying(messages: list[Message], receive: Receive) -> Receive:
    """``receive`` that hands out ``messages`` again before going on to the real one."""
    queued = list(messages)

    async def replay() -> Message:
        return queued.pop(0) if queued else await receive()

    return replay


def parse(body: bytes) -> Poll | None:
    """The poll ``body`` is, or None for anything the SDK should answer."""
    if len(body) > MAX_POLL_BODY:
        return None
    try:
        message = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(message, dict) or message.get("method") != "tasks/get":
        return None
    rpc_id, params = message.get("id"), message.get("params")
    if message.get("jsonrpc") != "2.0" or not isinstance(rpc_id, str | int):
        return None
    if not isinstance(params, dict) or not isinstance(params.get("taskId"), str):
        return None
    try:
        return Poll(rpc_id, uuid.UUID(params["taskId"]))
    except ValueError:
        return None  # not a request's id: the SDK path says so in its own words


def client_time(value: datetime | None) -> str | None:
    """A time as the SDK path's summary has it (``mcp_server.summarize``): the API's
    millisecond timestamp, read back by the client library, in ``isoformat``."""
    if value is None:
        return None
    value = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    return value.replace(microsecond=value.microsecond // 1000 * 1000).isoformat()


def summary_of(row: RequestRecord, now: datetime) -> dict[str, Any]:
    """The fields of a request's summary (``mcp_server.summarize``) that
    ``mcp_tasks.task_of`` reads, as the SDK path has them: a pending request past its
    deadline reads as expired at its deadline (``json_answers.request_to_dict``)."""
    status, decided_at = row.status, row.decided_at
    if status == "pending" and is_past_expiry(row.expires_at, now):
        status, decided_at = "expired", row.expires_at
    return {
        "id": str(row.id),
        "status": status,
        "decided_by": row.decided_by_name
        or (str(row.decided_by) if row.decided_by is not None else None),
        "comment": row.decision_comment,
        "decided_at": client_time(decided_at),
        "created_at": client_time(row.created_at),
    }


def sdk_loaded() -> bool:
    """Whether ``task_of`` can be had without importing the SDK on the event loop."""
    return TASKS_MODULE in sys.modules


def visible(row: RequestRecord, caller: Principal) -> bool:
    """A task is its connection's: another connection's credentials see it only as an
    admin's (as for configuring a request's steps, decisions.md)."""
    return row.connection_id == caller.connection_id or caller.is_admin


async def read_task(scope: Scope, task_id: uuid.UUID) -> dict[str, Any]:
    """The task that is request ``task_id``, read as the caller (AppError if it cannot)."""
    task_of = sys.modules[TASKS_MODULE].task_of
    request = Request(scope)
    principal = principal_with_scope(request, "approvals:read")
    reads = ApprovalReads(context_of(request).db.queries)
    row = await service.get_request(reads, principal, task_id, principal_check_of(request))
    if not visible(row, principal):
        raise NotFound("No approval request with this id.")
    task: dict[str, Any] = task_of(summary_of(row, utcnow()))
    return task


async def answer(scope: Scope, receive: Receive, send: Send) -> None:
    """The JSON-RPC answer to the poll the API guard found, as JSON (the client accepts it
    beside SSE); the guard has counted it as the API read it stands for. An ASGI app, so
    that the guard calls it where it would call the app."""
    poll: Poll = scope["state"][POLL]
    reply: dict[str, Any] = {"jsonrpc": "2.0", "id": poll.rpc_id}
    try:
        reply["result"] = await read_task(scope, poll.task_id)
    except AppError as exc:
        # An unknown task is the caller's mistake (spec: -32602), as on the SDK path.
        code = INVALID_PARAMS if exc.code == "NOT_FOUND" else INTERNAL_ERROR
        reply["error"] = {"code": code, "message": f"{exc.code}: {exc.message}"}
    body = orjson.dumps(reply)
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})
