"""The part of ``/mcp`` that needs the official ``mcp`` SDK, imported only on first use.

remote_mcp/server.py imports this module the first time ``/mcp`` or its metadata is
asked for: the SDK and its dependencies are a large share of the server's memory and
start-up time, and most deployments never serve a remote agent.
"""

from __future__ import annotations

from typing import Any

import httpx
from mcp.server.auth.handlers.metadata import ProtectedResourceMetadataHandler
from mcp.server.auth.routes import cors_middleware
from mcp.server.context import ServerRequestContext
from mcp.server.mcpserver import Context, MCPServer, RequestStateSecurity
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.auth import ProtectedResourceMetadata
from signoff_client import AsyncSignoffClient
from signoff_client.mcp_server import build_server
from starlette.types import ASGIApp

from signoff import __version__
from signoff.auth.principal import ALL_SCOPES, Principal
from signoff.config import Settings
from signoff.remote_mcp.resource import MCP_PATH, resource_url

# The in-process calls' base URL: never resolved, the transport hands them to the app.
IN_PROCESS_BASE_URL = "http://signoff.in-process"


def _bearer_of(ctx: Context[Any, Any]) -> str:
    """The credential the caller sent with this MCP request (checked by the API guard)."""
    headers = ctx.headers or {}
    scheme, _, token = headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise ToolError("UNAUTHORIZED: Missing or invalid authentication.")
    return token.strip()


def caller_of(ctx: ServerRequestContext[Any, Any]) -> str:
    """Who makes this MCP request, as the API guard authenticated it: what a sealed
    request state is bound to, so that only the credentials it was given to (the same
    connection and user, by the same means) can carry it back. Raises if the request has
    no such caller (the SDK then refuses the state)."""
    state = getattr(ctx.request, "scope", {}).get("state", {})
    principal = state.get("principal")
    if not isinstance(principal, Principal):
        raise RuntimeError("an /mcp request without the API guard's principal")
    return f"{principal.auth_method}:{principal.connection_id}:{principal.user_id}"


def build_mcp_server(
    http: httpx.AsyncClient, state_key: bytes, pages_at: str | None = None
) -> MCPServer:
    """The stdio server's tools, each calling this app in-process through ``http``;
    ``pages_at`` (the public URL) is where clients that open URLs send their user.

    ``state_key`` seals the state an elicitation's retry carries back: every replica
    derives the same one from the secret key, so the retry may reach any of them,
    before or after a restart. The state is bound to its caller (``caller_of``): carried
    back with other credentials it is refused (-32602, "Invalid or expired
    requestState")."""

    def client_for(ctx: Context[Any, Any]) -> AsyncSignoffClient:
        # Both kinds of credentials travel as a bearer; the client only names them.
        return AsyncSignoffClient(
            IN_PROCESS_BASE_URL, oauth_token=_bearer_of(ctx), http_client=http
        )

    server = build_server(
        client_for,
        version=__version__,
        pages_at=pages_at,
        request_state_security=RequestStateSecurity(keys=[state_key], bind_principal=caller_of),
    )
    # Stateless: every MCP request stands alone, so any replica can answer any of
    # them, and a tool's progress notifications travel on its own request's stream.
    server.streamable_http_app(
        streamable_http_path=MCP_PATH,
        stateless_http=True,
        # Host and Origin checks guard servers that trust ambient credentials; every
        # call here carries its own bearer token, so a rebound name gains nothing,
        # and operators put the service behind names of their own.
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    return server


def mcp_endpoint(server: MCPServer) -> ASGIApp:
    """``/mcp`` itself; answers only while ``server.session_manager.run()`` is entered."""
    return StreamableHTTPASGIApp(server.session_manager)


def metadata_app(settings: Settings) -> ASGIApp:
    """The protected resource metadata of ``/mcp`` (RFC 9728), with CORS for browsers."""
    # Built from strings: the model keeps them as written, and the issuer has no
    # trailing slash (RFC 8414 compares it character for character).
    metadata = ProtectedResourceMetadata.model_validate(
        {
            "resource": resource_url(settings),
            "authorization_servers": [settings.public_url],
            "scopes_supported": list(ALL_SCOPES),
            "resource_name": "signoff",
        }
    )
    return cors_middleware(ProtectedResourceMetadataHandler(metadata).handle, ["GET", "OPTIONS"])
