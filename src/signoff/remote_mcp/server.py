"""``/mcp``: signoff's MCP tools over streamable HTTP, for agents that connect remotely.

The tools are the very ones ``signoff-mcp`` serves over stdio (``signoff_client``'s
``build_server``); the official ``mcp`` SDK speaks the protocol. Each tool call is made
with the caller's own credentials through the client library, whose HTTP calls go to
this app in-process (``httpx.ASGITransport``: no socket, no loop back through the
network or the public URL). So a tool call *is* an ``/api/v1`` call: the same scopes
(a token without ``approvals:write`` gets an ``INSUFFICIENT_SCOPE`` tool error), the
same rate limits, the same emergency stop, the same validation, with no second
implementation of the tools to keep in step with the stdio server.

Authentication of ``/mcp`` itself is the API guard's (middleware.py): an unknown key
gets 401 with ``WWW-Authenticate: Bearer resource_metadata=...``, which points MCP
clients at the protected resource metadata (RFC 9728) and from there at our
authorization server.

The SDK is loaded on first use (remote_mcp/sdk.py holds every use of it): most
deployments never serve a remote agent, and the SDK is a large share of the server's
memory. Its session manager runs an anyio task group, which must be entered and left by
one task: the lifespan starts that task, which waits until the first authenticated
``/mcp`` request asks for the server, builds it, and keeps its session manager running
until shutdown. Requests that arrive while it starts wait for that one start.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import httpx
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from signoff.config import Settings
from signoff.crypto import derived_key
from signoff.errors import ServiceUnavailable
from signoff.remote_mcp.resource import MCP_PATH, PROTECTED_RESOURCE_PATH, resource_metadata_url

# What the key sealing ``/mcp``'s elicitation state is derived for (crypto.derived_key).
MCP_REQUEST_STATE_KEY = "mcp/request-state"

logger = logging.getLogger(__name__)

SDK_MODULE = "signoff.remote_mcp.sdk"


async def _load_sdk() -> None:
    """Import the SDK off the event loop: the import takes a noticeable fraction of a
    second, which other requests should not wait out."""
    await asyncio.to_thread(importlib.import_module, SDK_MODULE)


@dataclass
class _Run:
    """One lifespan's MCP server: asked for, ready (or failed), stopping."""

    needed: asyncio.Event = field(default_factory=asyncio.Event)
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    endpoint: ASGIApp | None = None  # set while the session manager runs


class RemoteMcp:
    """The routes of ``/mcp`` and its metadata, and the task that runs the SDK's server."""

    def __init__(self, app: ASGIApp, settings: Settings) -> None:
        self.app = app
        self.settings = settings
        self._run: _Run | None = None

    def routes(self) -> list[BaseRoute]:
        publish = _LazyMetadata(self.settings)
        metadata_paths = (
            urlsplit(resource_metadata_url(self.settings)).path,
            PROTECTED_RESOURCE_PATH,
        )
        return [
            Route(MCP_PATH, _LazyEndpoint(self), methods=["GET", "POST", "DELETE"]),
            # The path-suffixed form the 401 names, and the bare one some clients try.
            *(Route(path, publish, methods=["GET", "OPTIONS"]) for path in metadata_paths),
        ]

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        run = _Run()
        self._run = run
        task = asyncio.create_task(self._serve(run), name="remote MCP")
        try:
            yield
        finally:
            run.stop.set()
            run.needed.set()  # wakes the task if /mcp was never used
            await task
            self._run = None

    async def endpoint(self) -> ASGIApp:
        """The running server's endpoint, started by the first caller; 503 if it cannot."""
        run = self._run
        if run is None:
            raise ServiceUnavailable("The MCP server is not running.")
        run.needed.set()
        await run.ready.wait()
        if run.endpoint is None:
            raise ServiceUnavailable("The MCP server is not available.")
        return run.endpoint

    async def _serve(self, run: _Run) -> None:
        """Enters and leaves the session manager's task group, in this one task."""
        await run.needed.wait()
        try:
            if not run.stop.is_set():
                await self._run_server(run)
        except Exception:
            logger.exception("remote MCP server failed")
        finally:
            run.endpoint = None
            run.ready.set()  # nobody waits for a start that will not come

    async def _run_server(self, run: _Run) -> None:
        await _load_sdk()
        from signoff.remote_mcp import sdk

        transport = httpx.ASGITransport(app=self.app)
        async with httpx.AsyncClient(transport=transport, base_url=sdk.IN_PROCESS_BASE_URL) as http:
            server = sdk.build_mcp_server(
                http,
                state_key=derived_key(self.settings, MCP_REQUEST_STATE_KEY),
                pages_at=self.settings.public_url,
            )
            async with server.session_manager.run():
                run.endpoint = sdk.mcp_endpoint(server)
                run.ready.set()
                await run.stop.wait()


class _LazyEndpoint:
    """``/mcp``, reached after the API guard: only an authenticated request loads the SDK."""

    def __init__(self, remote: RemoteMcp) -> None:
        self.remote = remote

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # A task poll the API guard found never comes here: the guard answers it
        # (remote_mcp/task_poll.py).
        endpoint = await self.remote.endpoint()
        await endpoint(scope, receive, send)


class _LazyMetadata:
    """The protected resource metadata, built by the SDK on the first request for it."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._app: ASGIApp | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._app is None:
            await _load_sdk()
            from signoff.remote_mcp import sdk

            self._app = sdk.metadata_app(self.settings)
        await self._app(scope, receive, send)
