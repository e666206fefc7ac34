"""The SDK behind ``/mcp`` is loaded on first use: importing and building the app leaves it
out, the first authenticated request starts the one server every caller then shares, and
a server that cannot start answers 503 instead of holding its callers."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from mcp.server.auth.routes import build_resource_metadata_url as sdk_metadata_url
from pydantic import AnyHttpUrl

from signoff.remote_mcp import sdk
from signoff.remote_mcp.resource import build_resource_metadata_url
from tests.conftest import Org
from tests.helpers import python_apart
from tests.mcp.conftest import Live

pytestmark = pytest.mark.anyio

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"},
    },
}
MCP_HEADERS = {"Accept": "application/json, text/event-stream"}


@pytest.mark.parametrize(
    "resource",
    [
        "https://signoff.example.com/mcp",
        "https://example.com/approvals/mcp",
        "https://example.com/approvals/mcp/",
        "https://EXAMPLE.com:443/mcp",
        "http://127.0.0.1:8000/mcp",
        "https://example.com/",
        "https://example.com",
    ],
)
def test_the_metadata_url_is_the_sdks_to_the_byte(resource: str) -> None:
    assert build_resource_metadata_url(resource) == str(sdk_metadata_url(AnyHttpUrl(resource)))


def test_importing_and_building_the_app_leaves_the_sdk_unloaded(tmp_path: Any) -> None:
    script = (
        "import sys\n"
        "from signoff.app import create_app\n"
        "create_app()\n"
        "print(sorted(m for m in sys.modules if m == 'mcp' or m.startswith('mcp.')))\n"
    )
    assert python_apart(script, f"sqlite+aiosqlite:///{tmp_path}/signoff.db") == "[]"


@pytest.fixture
def builds(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the MCP servers built; the app is built by tests after this patch."""
    made: list[int] = []
    real = sdk.build_mcp_server

    def counted(http: httpx.AsyncClient, **options: Any) -> Any:
        made.append(1)
        return real(http, **options)

    monkeypatch.setattr(sdk, "build_mcp_server", counted)
    return made


async def test_concurrent_first_requests_share_one_start(
    builds: list[int], live: Live, org: Org
) -> None:
    async with httpx.AsyncClient(base_url=live.base_url, timeout=30) as http:
        refused = await http.post(
            "/mcp", json=INITIALIZE, headers={**MCP_HEADERS, "Authorization": "Bearer gk_nope"}
        )
        assert refused.status_code == 401
        assert builds == []  # an unauthenticated caller starts nothing

        answers = await asyncio.gather(
            *(
                http.post("/mcp", json=INITIALIZE, headers={**MCP_HEADERS, **org.member.headers})
                for _ in range(5)
            )
        )
    assert [answer.status_code for answer in answers] == [200] * 5
    assert all('"serverInfo"' in answer.text for answer in answers)
    assert builds == [1]


async def test_a_server_that_cannot_start_answers_503(
    monkeypatch: pytest.MonkeyPatch, live: Live, org: Org
) -> None:
    def broken(http: httpx.AsyncClient, **options: Any) -> Any:
        raise RuntimeError("no MCP today")

    monkeypatch.setattr(sdk, "build_mcp_server", broken)
    async with httpx.AsyncClient(base_url=live.base_url, timeout=30) as http:
        for _ in range(2):  # the first start fails, and later callers are not held either
            answer = await http.post(
                "/mcp", json=INITIALIZE, headers={**MCP_HEADERS, **org.member.headers}
            )
            assert answer.status_code == 503
            assert answer.json()["error"]["code"] == "SERVICE_UNAVAILABLE"
            assert "no MCP today" not in answer.text


async def test_the_metadata_is_published_with_cors(live: Live) -> None:
    url = "/.well-known/oauth-protected-resource/mcp"
    async with httpx.AsyncClient(base_url=live.base_url) as http:
        published = await http.get(url, headers={"Origin": "https://inspector.example"})
        preflight = await http.options(
            url,
            headers={
                "Origin": "https://inspector.example",
                "Access-Control-Request-Method": "GET",
            },
        )
    assert published.status_code == 200
    assert published.headers["cache-control"] == "public, max-age=3600"
    assert published.headers["access-control-allow-origin"] == "*"
    assert published.json()["bearer_methods_supported"] == ["header"]
    assert published.json()["resource_name"] == "signoff"
    assert preflight.status_code == 200
    assert "GET" in preflight.headers["access-control-allow-methods"]
