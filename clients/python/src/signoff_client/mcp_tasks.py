"""``request_approval`` as an MCP task (protocol 2025-11-25's ``tasks``), for clients that
ask for one; every other client gets the tool as before.

A task *is* the approval request: its id is the request's id and its state is read from
the request on every ``tasks/get``. Nothing is kept in process memory, so a task survives
a restart of the server and any replica answers for it, and a poll costs what a
``GET /api/v1/approvals/:id`` costs (it is one, made with the caller's credentials).

The SDK (2.x) carries the task types but no task machinery, so this is a server
middleware: it runs before the SDK validates anything and answers ``tasks/*`` itself.

States: ``working`` while the request is pending; ``completed`` once approved (its
result carries the decision, the final arguments and the receipt); ``failed`` when
rejected, expired or cancelled, the reason in ``statusMessage``. ``tasks/cancel``
cancels the request.

A task is its connection's: ``tasks/*`` answer only for tasks created with the caller's
connection (an OAuth token: its client's), or for any of the org's when the caller acts
as an admin; another's is as unknown as a task that does not exist. ``tasks/list`` reads
the org's requests made over MCP a page at a time, newest first, and leaves out those the
caller may not see (so a page may hold fewer); the cursor is the next page's number.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS
from pydantic import BaseModel

from signoff_client._client import AsyncSignoffClient
from signoff_client._errors import APIConnectionError, APIError, WaitTimeout
from signoff_client._models import Approval, ApprovalPage

# The one protocol revision with tasks in its core (2026-07-28 moved them to an extension).
TASKS_VERSION = "2025-11-25"
TASK_TOOL = "request_approval"
POLL_INTERVAL_MS = 5000
# Each wait inside ``tasks/result`` is one long poll; the loop repeats them until decided.
RESULT_WAIT_SECONDS = 60.0
RELATED_TASK = "io.modelcontextprotocol/related-task"

TASKS_CAPABILITY: dict[str, Any] = {
    "list": {},
    "cancel": {},
    "requests": {"tools": {"call": {}}},
}
# The requests tasks/list shows: those made through request_approval.
TASK_SOURCE = "mcp"
TASKS_PAGE_SIZE = 50

# What a task of another connection reads as: the API's words for an unknown request.
UNKNOWN_TASK = "NOT_FOUND: No approval request with this id."

Summarize = Callable[[Any], dict[str, Any]]
ClientFor = Callable[[Context[Any, Any]], AsyncSignoffClient]


@dataclass(frozen=True)
class Caller:
    """Whose tasks the credentials of a call see (``GET /api/v1/me``)."""

    connection_id: str
    sees_all: bool  # an admin's credentials: every task of the org

    @classmethod
    def of(cls, me: Mapping[str, Any]) -> Caller:
        connection = me["connection"]
        admin = me["user"]["role"] == "admin" and not connection.get("owner_deactivated")
        return cls(str(connection["id"]), admin)

    def sees(self, approval: Approval) -> bool:
        return self.sees_all or approval.connection_id == self.connection_id


def task_state(summary: Mapping[str, Any]) -> tuple[str, str]:
    """The task status and its message for a request's summary (mcp_server.summarize)."""
    status = summary["status"]
    if status == "pending":
        return "working", "Waiting for a human decision on signoff."
    if status == "approved":
        return "completed", f"Approved by {summary.get('decided_by') or 'an approver'}."
    reason = {
        "rejected": f"Rejected by {summary.get('decided_by') or 'an approver'}",
        "expired": "Expired: nobody decided in time",
        "cancelled": "Cancelled",
    }.get(status, status)
    comment = summary.get("comment")
    return "failed", f"{reason}: {comment}" if comment else f"{reason}."


def task_of(summary: Mapping[str, Any]) -> dict[str, Any]:
    """The wire form of the task that is this request."""
    status, message = task_state(summary)
    return {
        "taskId": summary["id"],
        "status": status,
        "statusMessage": message,
        "createdAt": summary["created_at"],
        "lastUpdatedAt": summary.get("decided_at") or summary["created_at"],
        "ttl": None,  # the request is kept as long as the organisation keeps its history
        "pollInterval": POLL_INTERVAL_MS,
    }


def tool_result(summary: dict[str, Any]) -> dict[str, Any]:
    """``tasks/result``: the tool's answer, as ``tools/call`` would have given it."""
    status, _ = task_state(summary)
    return {
        "content": [{"type": "text", "text": json.dumps(summary, indent=2)}],
        "structuredContent": summary,
        "isError": status == "failed",
        "_meta": {RELATED_TASK: {"taskId": summary["id"]}},
    }


def _dumped(result: HandlerResult) -> dict[str, Any]:
    if isinstance(result, BaseModel):
        return result.model_dump(by_alias=True, mode="json", exclude_none=True)
    return dict(result or {})


def _page_of(cursor: Any) -> int:
    """The page a ``tasks/list`` cursor names (the first without one)."""
    if cursor is None:
        return 1
    if not isinstance(cursor, str) or not cursor.isdigit() or int(cursor) < 1:
        raise MCPError(code=INVALID_PARAMS, message="cursor is not one this server gave")
    return int(cursor)


def _task_id(ctx: ServerRequestContext[Any, Any]) -> str:
    task_id = (ctx.params or {}).get("taskId")
    if not isinstance(task_id, str) or not task_id:
        raise MCPError(code=INVALID_PARAMS, message="taskId is required")
    return task_id


class TaskMiddleware:
    """Serves ``request_approval`` as a task at protocol 2025-11-25 (see the module)."""

    def __init__(self, client_for: ClientFor, summarize: Summarize) -> None:
        self.client_for = client_for
        self.summarize = summarize
        self.server: Any = None  # the MCPServer, set once it exists

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        if ctx.method == "initialize":
            return self._advertise(_dumped(await call_next(ctx)))
        if ctx.protocol_version != TASKS_VERSION:
            return await call_next(ctx)
        if ctx.method == "tools/list":
            return self._mark_tool(_dumped(await call_next(ctx)))
        params = ctx.params or {}
        if ctx.method == "tools/call" and params.get("name") == TASK_TOOL and params.get("task"):
            return await self._create(ctx, call_next)
        if ctx.method == "tasks/get":
            return task_of(self.summarize(await self._own(ctx)))
        if ctx.method == "tasks/cancel":
            await self._own(ctx)
            return task_of(await self._read(ctx, lambda client, i: client.cancel(i)))
        if ctx.method == "tasks/result":
            await self._own(ctx)
            return tool_result(await self._read(ctx, self._decision))
        if ctx.method == "tasks/list":
            return await self._list(ctx)
        return await call_next(ctx)

    @staticmethod
    def _advertise(result: dict[str, Any]) -> dict[str, Any]:
        if result.get("protocolVersion") == TASKS_VERSION:
            result.setdefault("capabilities", {})["tasks"] = TASKS_CAPABILITY
        return result

    @staticmethod
    def _mark_tool(result: dict[str, Any]) -> dict[str, Any]:
        for tool in result.get("tools", []):
            if tool.get("name") == TASK_TOOL:
                # Optional: a client without tasks calls it as a plain tool.
                tool["execution"] = {"taskSupport": "optional"}
        return result

    async def _create(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> dict[str, Any]:
        """Creates the request through the tool itself (same checks, same answer), without
        waiting: the task's client polls instead."""
        params = {key: value for key, value in (ctx.params or {}).items() if key != "task"}
        params["arguments"] = {
            key: value
            for key, value in (params.get("arguments") or {}).items()
            if key != "wait_seconds"
        }
        result = _dumped(await call_next(replace(ctx, params=params)))
        if result.get("isError"):
            return result  # refused (scope, validation...): no task was made
        task = task_of(result["structuredContent"])
        # ``content`` beside ``task``: the SDK's client checks every tools/call answer
        # against CallToolResult, whose one required field it is; a task client reads
        # ``task`` and ignores it (results are open to extra fields).
        note = f"Task {task['taskId']} created: poll tasks/get, then read tasks/result."
        return {"task": task, "content": [{"type": "text", "text": note}]}

    @staticmethod
    async def _decision(client: AsyncSignoffClient, approval_id: str) -> Any:
        """``tasks/result`` waits for the decision, one long poll after another."""
        while True:
            try:
                return await client.wait_for_decision(approval_id, RESULT_WAIT_SECONDS)
            except WaitTimeout:
                continue

    async def _own(self, ctx: ServerRequestContext[Any, Any]) -> Approval:
        """The task's request, if it is one the caller may see (else -32602, unknown)."""
        task_id = _task_id(ctx)

        async def read(client: AsyncSignoffClient) -> tuple[Caller, Approval]:
            return Caller.of(await client.me()), await client.get_approval(task_id)

        caller: Caller
        approval: Approval
        caller, approval = await self._call(ctx, read)
        if not caller.sees(approval):
            raise MCPError(code=INVALID_PARAMS, message=UNKNOWN_TASK)
        return approval

    async def _list(self, ctx: ServerRequestContext[Any, Any]) -> dict[str, Any]:
        page = _page_of((ctx.params or {}).get("cursor"))

        async def read(client: AsyncSignoffClient) -> tuple[Caller, ApprovalPage]:
            caller = Caller.of(await client.me())
            listed = await client.list_page(page, source=TASK_SOURCE, page_size=TASKS_PAGE_SIZE)
            return caller, listed

        caller: Caller
        listed: ApprovalPage
        caller, listed = await self._call(ctx, read)
        answer: dict[str, Any] = {
            "tasks": [task_of(self.summarize(a)) for a in listed.data if caller.sees(a)]
        }
        if page < listed.pagination.total_pages:
            answer["nextCursor"] = str(page + 1)
        return answer

    async def _read(self, ctx: ServerRequestContext[Any, Any], call: Any) -> dict[str, Any]:
        task_id = _task_id(ctx)
        return self.summarize(await self._call(ctx, lambda client: call(client, task_id)))

    async def _call(self, ctx: ServerRequestContext[Any, Any], call: Any) -> Any:
        """``call(client)`` with the caller's client; API errors become JSON-RPC errors."""
        try:
            client = self.client_for(Context(request_context=ctx, mcp_server=self.server))
            return await call(client)
        except APIError as exc:
            # An unknown task and one already over are the caller's mistake (spec: -32602).
            code = INVALID_PARAMS if exc.code in {"NOT_FOUND", "REQUEST_NOT_PENDING"} else -32603
            raise MCPError(code=code, message=f"{exc.code}: {exc.message}") from exc
        except APIConnectionError as exc:
            raise MCPError(code=-32603, message=f"CONNECTION_ERROR: {exc}") from exc
        except ToolError as exc:  # no usable credentials on this request
            raise MCPError(code=INVALID_PARAMS, message=str(exc)) from exc
