"""``/mcp`` as an OAuth protected resource: its URL and where its metadata is published.

Free of the ``mcp`` SDK: the API guard names the metadata URL in every 401 of ``/mcp``,
and the SDK is only loaded once ``/mcp`` is used (remote_mcp/server.py).
"""

from __future__ import annotations

from urllib.parse import urlparse

from pydantic import AnyHttpUrl

from signoff.config import Settings

MCP_PATH = "/mcp"
PROTECTED_RESOURCE_PATH = "/.well-known/oauth-protected-resource"


def resource_url(settings: Settings) -> str:
    """``/mcp`` as the outside world names it: the resource of RFC 9728 and RFC 8707."""
    return settings.public_url + MCP_PATH


def build_resource_metadata_url(resource_server_url: str) -> str:
    """RFC 9728 section 3.1: the well-known path goes between the host and the resource's
    path. The SDK's function of the same name, step for step (same normalisation by
    pydantic, a bare "/" path counting as none), so the 401 and the published routes name
    the very URL the SDK would; tests/mcp/test_resource_metadata_url.py compares both."""
    parsed = urlparse(str(AnyHttpUrl(resource_server_url)))
    resource_path = parsed.path if parsed.path != "/" else ""
    return str(
        AnyHttpUrl(f"{parsed.scheme}://{parsed.netloc}{PROTECTED_RESOURCE_PATH}{resource_path}")
    )


def resource_metadata_url(settings: Settings) -> str:
    """Where the metadata of ``/mcp`` is published (RFC 9728 section 3.1, path-suffixed)."""
    return build_resource_metadata_url(resource_url(settings))
