"""signoff's tools for MCP agents, on the official ``mcp`` SDK (``pip install
signoff-client[mcp]``).

``build_server(client_for)`` makes the server; ``client_for`` gives the tools an
``AsyncSignoffClient`` for the call at hand (from the tool's ``Context``), so the same
tools serve the local stdio command below, where one client holds the operator's key,
and a remote mount, where each caller brings their own credentials.

``signoff-mcp`` runs it over stdio, configured by ``SIGNOFF_URL`` and ``SIGNOFF_API_KEY``
(or ``SIGNOFF_OAUTH_TOKEN``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import time
from collections.abc import Callable, Iterator
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context, MCPServer, RequestStateSecurity
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp_types import (
    ClientCapabilities,
    ElicitationCapability,
    ElicitRequest,
    ElicitRequestURLParams,
    InputRequiredResult,
    ToolAnnotations,
    UrlElicitationCapability,
)
from mcp_types.version import is_version_at_least
from pydantic import BaseModel, Field

from signoff_client._client import AsyncSignoffClient, __version__
from signoff_client._errors import APIConnectionError, APIError, WaitTimeout
from signoff_client._models import Approval
from signoff_client.mcp_tasks import TaskMiddleware

ClientFactory = Callable[[Context[Any, Any]], AsyncSignoffClient]

# How long request_approval waits for the client to answer "open this page?".
ELICITATION_TIMEOUT_SECONDS = 30.0
URL_ELICITATION = ClientCapabilities(
    elicitation=ElicitationCapability(url=UrlElicitationCapability())
)

# The first revision that asks the client inside the tool's answer (``input_required``)
# rather than by a request of its own, which the stateless /mcp could not carry.
INPUT_REQUIRED_VERSION = "2026-07-28"
OPEN_PAGE = "open_page"
PAGE_MESSAGE = "A person must approve this on signoff: open the request's page to decide."

# How often a waiting tool tells the MCP client it is still waiting.
PROGRESS_INTERVAL_SECONDS = 5.0
MAX_WAIT_SECONDS = 3600.0
LIST_LIMIT = 50

INSTRUCTIONS = (
    "signoff asks a human to approve an action before you take it. Call request_approval "
    "with what you intend to do and why; act only once the answer's status is 'approved'. "
    "If it is still pending, call wait_for_decision with its id. 'rejected' means do not "
    "act: read the comment for the reason."
)

Priority = Literal["low", "medium", "high", "critical"]
PreviewKind = Literal["text", "markdown", "diff", "sql", "json", "email"]
Status = Literal["pending", "approved", "rejected", "cancelled", "expired"]
ApprovalId = Annotated[str, Field(description="The approval request's id (a UUID).")]


class Preview(BaseModel):
    """What the approver should look at before deciding."""

    kind: Annotated[PreviewKind, Field(description="How the content is shown.")]
    content: Annotated[
        str, Field(description="The diff, SQL statement, mail, text... exactly as it will run.")
    ]


def summarize(approval: Approval) -> dict[str, Any]:
    """What an agent needs to know about a request, in a few plain fields."""
    summary: dict[str, Any] = {
        "id": approval.id,
        "status": approval.status,
        "title": approval.title,
        "priority": approval.priority,
        "decided": approval.is_final,
        "comment": approval.decision_comment,
        "decided_by": approval.decided_by_name or approval.decided_by,
        "decided_at": approval.decided_at.isoformat() if approval.decided_at else None,
        "created_at": approval.created_at.isoformat(),
    }
    if approval.arguments or approval.arguments_edited:
        summary["arguments"] = approval.arguments
        summary["arguments_hash"] = approval.arguments_hash
        summary["arguments_edited"] = approval.arguments_edited
    if approval.receipt:
        summary["receipt"] = approval.receipt
    elif approval.receipt_issued:
        summary["receipt_issued"] = True
    if not approval.is_final:
        summary["next_step"] = (
            "Not decided yet: do not act. Call wait_for_decision with this id to wait."
        )
    elif approval.is_approved and approval.arguments_edited:
        summary["next_step"] = (
            "Approved with edited arguments: act with 'arguments' as given here, not with "
            "the ones you asked for."
        )
    return summary


@contextlib.contextmanager
def api_errors() -> Iterator[None]:
    """API refusals become MCP tool errors carrying the API's code and message."""
    try:
        yield
    except APIError as exc:
        raise ToolError(f"{exc.code}: {exc.message}") from exc
    except APIConnectionError as exc:
        raise ToolError(f"CONNECTION_ERROR: signoff could not be reached ({exc})") from exc


async def _decision_or_latest(
    client: AsyncSignoffClient, approval_id: str, seconds: float
) -> Approval:
    try:
        return await client.wait_for_decision(approval_id, seconds)
    except WaitTimeout as timeout:
        return timeout.approval or await client.get_approval(approval_id)


async def wait_with_progress(
    client: AsyncSignoffClient, ctx: Context[Any, Any], approval_id: str, seconds: float
) -> Approval:
    """Wait up to ``seconds`` for a decision, reporting progress every few seconds.

    The answer is the decided request, or the still-pending one when time runs out. The
    reports run beside the client's long polls (up to a minute each) rather than cutting
    them short: a wait costs about one API call a minute, and every call counts against
    the caller's rate limit.
    """
    seconds = min(max(seconds, 0.0), MAX_WAIT_SECONDS)
    started = time.monotonic()
    waiting = asyncio.ensure_future(_decision_or_latest(client, approval_id, seconds))
    try:
        while True:
            await ctx.report_progress(
                round(time.monotonic() - started, 1),
                seconds,
                f"waiting for a human decision on {approval_id}",
            )
            done, _ = await asyncio.wait({waiting}, timeout=PROGRESS_INTERVAL_SECONDS)
            if done:
                return waiting.result()
    finally:
        waiting.cancel()


def page_of(pages_at: str, approval_id: str) -> str:
    return f"{pages_at.rstrip('/')}/requests/{approval_id}"


def asks_in_answer(ctx: Context[Any, Any]) -> bool:
    """Whether this call asks the client inside its answer (``input_required``)."""
    return is_version_at_least(ctx.request_context.protocol_version, INPUT_REQUIRED_VERSION)


def page_question(pages_at: str, approval_id: str) -> InputRequiredResult:
    """The answer that asks the client to send its user to the request's page (URL mode);
    ``request_state`` carries the request's id to the retry, which reads the request."""
    ask = ElicitRequestURLParams(
        message=PAGE_MESSAGE, url=page_of(pages_at, approval_id), elicitation_id=approval_id
    )
    return InputRequiredResult(
        input_requests={OPEN_PAGE: ElicitRequest(params=ask)}, request_state=approval_id
    )


async def send_to_page(ctx: Context[Any, Any], pages_at: str, approval_id: str) -> None:
    """Asks a client that can open URLs (URL-mode elicitation) to send its user to the
    request's page on signoff, where the decision is made; at the handshake revisions, as
    a request to the client (``page_question`` does it at the newer ones).

    The answer is never a decision: "accept" only means the user agreed to open the page,
    and no form is ever asked for. So a client that accepts every elicitation approves
    nothing. A connection that cannot carry the question (the stateless /mcp at a
    handshake revision has no back-channel) is simply not asked.
    """
    if not ctx.request_context.session.check_client_capability(URL_ELICITATION):
        return
    with contextlib.suppress(MCPError, TimeoutError):
        async with asyncio.timeout(ELICITATION_TIMEOUT_SECONDS):
            await ctx.elicit_url(PAGE_MESSAGE, page_of(pages_at, approval_id), approval_id)


def build_server(
    client_for: ClientFactory,
    *,
    name: str = "signoff",
    version: str = __version__,
    pages_at: str | None = None,
    request_state_security: RequestStateSecurity | None = None,
) -> MCPServer[Any]:
    """The MCP server with signoff's tools; ``client_for(ctx)`` gives each call its client.

    ``version`` is what the server reports in its ``serverInfo``: this package's own by
    default, the server's when ``/mcp`` serves the same tools. ``pages_at`` is the public
    URL of signoff's pages, for clients that can be sent there (``send_to_page``).
    ``request_state_security`` seals the state a client carries between an elicitation's
    answer and its retry; without it the key lives and dies with this process."""
    # request_approval as a task, for clients that ask for one (mcp_tasks.py).
    tasks = TaskMiddleware(client_for, summarize)
    server: MCPServer[Any] = MCPServer(
        name,
        version=version,
        instructions=INSTRUCTIONS,
        middleware=[tasks],
        request_state_security=request_state_security,
    )
    tasks.server = server
    read_only = ToolAnnotations(readOnlyHint=True, openWorldHint=True)

    @server.tool(annotations=ToolAnnotations(destructiveHint=False, openWorldHint=True))
    async def request_approval(
        title: Annotated[str, Field(description="What you want to do, in one line.")],
        description: Annotated[
            str, Field(description="Context for the approver: what, why, and the impact.")
        ],
        priority: Annotated[Priority, Field(description="How urgent it is.")],
        ctx: Context[Any, Any],
        action_type: Annotated[
            str | None,
            Field(description="Optional dotted label for routing, e.g. 'deploy.production'."),
        ] = None,
        metadata: Annotated[
            dict[str, Any] | None, Field(description="Optional JSON object kept with the request.")
        ] = None,
        arguments: Annotated[
            dict[str, Any] | None,
            Field(
                description="The exact parameters the action will run with (a JSON object). "
                "Once approved, run with the 'arguments' the answer gives: an approver may "
                "have edited them."
            ),
        ] = None,
        arguments_schema: Annotated[
            dict[str, Any] | None,
            Field(
                description="Optional JSON Schema (draft 2020-12) the arguments satisfy; "
                "with it, approvers may edit the arguments."
            ),
        ] = None,
        preview: Annotated[
            Preview | None,
            Field(description="Optional: what the approver should see (a diff, SQL, mail...)."),
        ] = None,
        wait_seconds: Annotated[
            float | None,
            Field(
                description="Wait up to this many seconds for the decision (progress is "
                "reported meanwhile). Without it, the answer comes back pending at once.",
                ge=0,
                le=MAX_WAIT_SECONDS,
            ),
        ] = None,
    ) -> dict[str, Any] | InputRequiredResult:
        """Ask a human to approve an action before you take it.

        Returns the request's id and status; once decided, also the comment and who
        decided. Act only if the status is 'approved', and then with the returned
        'arguments' (the approved ones); 'receipt' is the signed proof of the approval,
        for the executor to verify and redeem.
        """
        client = client_for(ctx)
        with api_errors():
            if ctx.request_state is not None:
                # The retry after the client was asked to open the page: whatever it
                # answered, the request it made is read as it is, never decided here.
                approval = await client.get_approval(ctx.request_state)
            else:
                approval = await client.create_approval(
                    title,
                    description,
                    priority,
                    action_type=action_type,
                    metadata=metadata,
                    arguments=arguments,
                    arguments_schema=arguments_schema,
                    preview=preview.model_dump() if preview is not None else None,
                    source="mcp",
                    idempotency_key=True,
                )
                if pages_at is not None and not approval.is_final:
                    if asks_in_answer(ctx):
                        if ctx.request_context.session.check_client_capability(URL_ELICITATION):
                            return page_question(pages_at, approval.id)
                    else:
                        await send_to_page(ctx, pages_at, approval.id)
            if wait_seconds and not approval.is_final:
                approval = await wait_with_progress(client, ctx, approval.id, wait_seconds)
        return summarize(approval)

    @server.tool(annotations=read_only)
    async def get_approval(id: ApprovalId, ctx: Context[Any, Any]) -> dict[str, Any]:
        """Read an approval request: its status, and the decision once there is one (with
        the final arguments and, when approved, the receipt)."""
        with api_errors():
            return summarize(await client_for(ctx).get_approval(id))

    @server.tool(annotations=read_only)
    async def wait_for_decision(
        id: ApprovalId,
        ctx: Context[Any, Any],
        timeout_seconds: Annotated[
            float, Field(description="Longest wait in seconds.", ge=0, le=MAX_WAIT_SECONDS)
        ] = 300.0,
    ) -> dict[str, Any]:
        """Wait for a human to decide an approval request (progress is reported meanwhile).

        Returns the request; if it is still pending when the time is up, 'decided' is false.
        Approved, it carries the final 'arguments' (edited if 'arguments_edited') and the
        'receipt'.
        """
        with api_errors():
            return summarize(await wait_with_progress(client_for(ctx), ctx, id, timeout_seconds))

    @server.tool(annotations=read_only)
    async def list_approvals(
        ctx: Context[Any, Any],
        status: Annotated[Status | None, Field(description="Only requests in this status.")] = None,
        search: Annotated[
            str | None, Field(description="Words to find in titles and descriptions.")
        ] = None,
    ) -> dict[str, Any]:
        """List approval requests, newest first (at most 50)."""
        requests: list[dict[str, Any]] = []
        pages = client_for(ctx).list_approvals(status=status, search=search)
        with api_errors():
            async with contextlib.aclosing(pages):
                async for approval in pages:
                    requests.append(summarize(approval))
                    if len(requests) == LIST_LIMIT:
                        break
        return {"approvals": requests, "count": len(requests)}

    @server.tool(annotations=ToolAnnotations(destructiveHint=True, idempotentHint=True))
    async def cancel_approval(id: ApprovalId, ctx: Context[Any, Any]) -> dict[str, Any]:
        """Withdraw a pending approval request you no longer need."""
        with api_errors():
            return summarize(await client_for(ctx).cancel(id))

    @server.tool(annotations=ToolAnnotations(destructiveHint=False))
    async def add_comment(
        id: ApprovalId,
        body: Annotated[str, Field(description="The comment; approvers see it.")],
        ctx: Context[Any, Any],
    ) -> dict[str, Any]:
        """Add a comment to an approval request, e.g. to answer an approver's question."""
        with api_errors():
            comment = await client_for(ctx).add_comment(id, body)
        return {"id": comment.id, "approval_id": id, "body": comment.body}

    return server


async def serve_stdio() -> None:
    # httpx logs every request at INFO; the host shows our stderr to people, keep it short.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    async with AsyncSignoffClient.from_env() as client:
        server = build_server(lambda _ctx: client, pages_at=client.base_url)
        await server.run_stdio_async()


def main() -> None:
    """``signoff-mcp``: the MCP server over stdio (``--version`` prints its version)."""
    if sys.argv[1:] == ["--version"]:
        print(f"signoff-mcp {__version__}")
        return
    try:
        asyncio.run(serve_stdio())
    except ValueError as exc:  # configuration missing: say what, without a traceback
        print(f"signoff-mcp: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
