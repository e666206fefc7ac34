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
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import urlsplit

import httpx
from mcp.server.auth.handlers.metadata import ProtectedResourceMetadataHandler
from mcp.server.auth.routes import cors_middleware
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.auth import ProtectedResourceMetadata
from signoff_client import AsyncSignoffClient
from signoff_client.mcp_server import build_server
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp

from signoff.auth.principal import ALL_SCOPES
from signoff.config import Settings
from signoff.remote_mcp.resource import MCP_PATH, resource_metadata_url, resource_url

# The in-process calls' base URL: never resolved, the transport hands them to the app.
IN_PROCESS_BASE_URL = "http://signoff.in-process"
PROTECTED_RESOURCE_PATH = "/.well-known/oauth-protected-resource"


def _bearer_of(ctx: Context[Any, Any]) -> str:
    """The credential the caller sent with this MCP request (checked by the API guard)."""
    headers = ctx.headers or {}
    scheme, _, token = headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise ToolError("UNAUTHORIZED: Missing or invalid authentication.")
    return token.strip()


class RemoteMcp:
    """The SDK's MCP server for ``/mcp``, its routes, and its session manager's lifespan."""

    def __init__(self, app: ASGIApp, settings: Settings) -> None:
        self.settings = settings
        self._http = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url=IN_PROCESS_BASE_URL
        )
        self.server = build_server(self._client_for)
        # Stateless: every MCP request stands alone, so any replica can answer any of
        # them, and a tool's progress notifications travel on its own request's stream.
        self.server.streamable_http_app(
            streamable_http_path=MCP_PATH,
            stateless_http=True,
            # Host and Origin checks guard servers that trust ambient credentials; every
            # call here carries its own bearer token, so a rebound name gains nothing,
            # and operators put the service behind names of their own.
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        )

    def _client_for(self, ctx: Context[Any, Any]) -> AsyncSignoffClient:
        # Both kinds of credentials travel as a bearer; the client only names them.
        return AsyncSignoffClient(
            IN_PROCESS_BASE_URL, oauth_token=_bearer_of(ctx), http_client=self._http
        )

    def routes(self) -> list[BaseRoute]:
        endpoint = StreamableHTTPASGIApp(self.server.session_manager)
        # Built from strings: the model keeps them as written, and the issuer has no
        # trailing slash (RFC 8414 compares it character for character).
        metadata = ProtectedResourceMetadata.model_validate(
            {
                "resource": resource_url(self.settings),
                "authorization_servers": [self.settings.public_url],
                "scopes_supported": list(ALL_SCOPES),
                "resource_name": "signoff",
            }
        )
        publish = cors_middleware(
            ProtectedResourceMetadataHandler(metadata).handle, ["GET", "OPTIONS"]
        )
        metadata_paths = (
            urlsplit(resource_metadata_url(self.settings)).path,
            PROTECTED_RESOURCE_PATH,
        )
        return [
            Route(MCP_PATH, endpoint, methods=["GET", "POST", "DELETE"]),
            # The path-suffixed form the 401 names, and the bare one some clients try.
            *(Route(path, publish, methods=["GET", "OPTIONS"]) for path in metadata_paths),
        ]

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        async with self.server.session_manager.run():
            try:
                yield
            finally:
                await self._http.aclose()
