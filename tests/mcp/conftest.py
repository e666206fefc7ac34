"""A live signoff for the remote MCP tests: the app served by uvicorn on a loopback port,
and the SDK's own streamable-HTTP client to talk to it."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx2
import pytest
import uvicorn
from mcp.client.streamable_http import streamable_http_client

from mcp import Client
from signoff.app import create_app
from signoff.config import Settings
from signoff.context import AppContext
from signoff.wiring import Wiring

STARTUP_DEADLINE_SECONDS = 20.0


@dataclass
class Live:
    base_url: str

    @property
    def mcp_url(self) -> str:
        return self.base_url + "/mcp"

    def session(self, token: str, **options: Any) -> Client:
        """The SDK's client; ``options`` go to ``Client`` (e.g. ``mode="legacy"`` for the
        2025-11-25 handshake, an ``elicitation_callback``)."""
        http = httpx2.AsyncClient(
            headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(30, read=60)
        )
        return Client(
            streamable_http_client(self.mcp_url, http_client=http),
            read_timeout_seconds=60,
            **options,
        )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@asynccontextmanager
async def serving(settings: Settings, wiring: Wiring) -> AsyncIterator[Live]:
    """The app, lifespan and all, served by uvicorn in this loop; ready once it says so."""
    port = _free_port()
    settings.public_url = f"http://127.0.0.1:{port}"
    app = create_app(settings, wiring=wiring, background=False)
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    )
    serve = asyncio.create_task(server.serve())
    loop = asyncio.get_running_loop()
    deadline = loop.time() + STARTUP_DEADLINE_SECONDS
    while not server.started:
        assert not serve.done(), "uvicorn stopped before it started"
        assert loop.time() < deadline, "uvicorn did not start in time"
        await asyncio.sleep(0.01)
    try:
        yield Live(f"http://127.0.0.1:{port}")
    finally:
        server.should_exit = True
        await serve


@pytest.fixture
async def live(ctx: AppContext, wiring: Wiring) -> AsyncIterator[Live]:
    async with serving(ctx.settings, wiring) as running:
        yield running


def structured(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content
    data: dict[str, Any] = result.structured_content
    assert json.loads(result.content[0].text) == data
    return data


def tool_error(result: Any) -> str:
    """The API's "CODE: message", after the SDK's "Error executing tool NAME: "."""
    assert result.is_error, result.structured_content
    text: str = result.content[0].text
    assert text.startswith("Error executing tool "), text
    return text.split(": ", 1)[1]
