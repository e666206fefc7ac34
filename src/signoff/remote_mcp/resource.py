"""``/mcp`` as an OAuth protected resource: its URL and where its metadata is published."""

from __future__ import annotations

from mcp.server.auth.routes import build_resource_metadata_url
from pydantic import AnyHttpUrl

from signoff.config import Settings

MCP_PATH = "/mcp"


def resource_url(settings: Settings) -> str:
    """``/mcp`` as the outside world names it: the resource of RFC 9728 and RFC 8707."""
    return settings.public_url + MCP_PATH


def resource_metadata_url(settings: Settings) -> str:
    """Where the metadata of ``/mcp`` is published (RFC 9728 section 3.1, path-suffixed)."""
    return str(build_resource_metadata_url(AnyHttpUrl(resource_url(settings))))
