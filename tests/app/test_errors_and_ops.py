"""The error envelope for the framework's own answers and for crashes; health, readiness
and the published OpenAPI document."""

from __future__ import annotations

import logging
from typing import Any

import httpx
import pytest
from fastapi.routing import APIRoute

from signoff.app import create_app
from signoff.approvals import service as approvals_service
from signoff.wiring import Wiring
from tests.conftest import Org, approval_body, assert_error, create_approval, make_settings


async def test_unknown_routes_are_404_envelopes(client: httpx.AsyncClient, org: Org) -> None:
    for path in ("/api/v1/nothing", "/api/v1/approvals/a/b/c", "/api/v2/approvals", "/nothing"):
        response = await client.get(path, headers=org.member.headers)
        assert_error(response, 404, "NOT_FOUND")
        assert response.headers["content-type"] == "application/json"
    # Under /api/v1 the guard ran first: the answer carries the rate-limit headers.
    response = await client.get("/api/v1/nothing", headers=org.member.headers)
    assert "x-ratelimit-limit" in response.headers


async def test_wrong_method_is_a_405_envelope(client: httpx.AsyncClient, org: Org) -> None:
    created = await create_approval(client, org.member)
    cases = [
        ("PUT", "/api/v1/approvals", {"GET", "POST"}),
        ("DELETE", "/api/v1/approvals", {"GET", "POST"}),
        ("POST", f"/api/v1/approvals/{created['id']}", {"GET", "PATCH", "DELETE"}),
        ("PATCH", "/api/v1/me", {"GET"}),
    ]
    for method, path, allowed in cases:
        response = await client.request(method, path, headers=org.member.headers, json={})
        assert_error(response, 405, "METHOD_NOT_ALLOWED")
        assert {m.strip() for m in response.headers["allow"].split(",")} - {"HEAD"} == allowed, path
    # The request itself is untouched.
    read = await client.get(f"/api/v1/approvals/{created['id']}", headers=org.member.headers)
    assert read.json()["status"] == "pending"


async def test_an_unexpected_exception_is_a_500_envelope_without_details(
    client: httpx.AsyncClient,
    org: Org,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    created = await create_approval(client, org.member)

    async def broken(*_: Any, **__: Any) -> Any:
        raise RuntimeError("connection string postgres://admin:hunter2@db")

    monkeypatch.setattr(approvals_service, "get_request", broken)
    with caplog.at_level(logging.ERROR):
        response = await client.get(
            f"/api/v1/approvals/{created['id']}", headers=org.member.headers
        )
    details = assert_error(response, 500, "INTERNAL_ERROR")
    assert details == {}
    for leak in ("hunter2", "RuntimeError", "Traceback", "File ", "signoff/"):
        assert leak not in response.text
    assert "x-ratelimit-limit" in response.headers
    # The trace goes to the log instead.
    assert any(record.exc_info for record in caplog.records)
    monkeypatch.undo()
    read = await client.get(f"/api/v1/approvals/{created['id']}", headers=org.member.headers)
    assert read.status_code == 200


async def test_healthz_and_readyz(client: httpx.AsyncClient) -> None:
    health = await client.get("/healthz")
    assert (health.status_code, health.json()) == (200, {"status": "ok"})
    ready = await client.get("/readyz")
    assert (ready.status_code, ready.json()) == (200, {"status": "ready"})


def _unreachable_database(backend: str, tmp_path: Any) -> str:
    if backend == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path}/no/such/dir/signoff.db"
    return "postgresql+asyncpg://postgres@127.0.0.1:1/signoff"


async def _probe(wiring: Wiring, path: str) -> httpx.Response:
    application = create_app(wiring.ctx.settings, wiring=wiring, background=False)
    transport = httpx.ASGITransport(app=application)
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://probe.test") as c:
            return await c.get(path)
    finally:
        await wiring.close()


async def test_readyz_is_503_when_the_database_is_unreachable(backend: str, tmp_path: Any) -> None:
    settings = make_settings(_unreachable_database(backend, tmp_path))
    wiring = Wiring.from_settings(settings)
    assert_error(await _probe(wiring, "/readyz"), 503, "SERVICE_UNAVAILABLE")
    # The process itself is alive.
    wiring = Wiring.from_settings(settings)
    assert (await _probe(wiring, "/healthz")).status_code == 200


async def test_readyz_is_503_when_the_configured_redis_is_unreachable(database_url: str) -> None:
    wiring = Wiring.from_settings(make_settings(database_url, redis_url="redis://127.0.0.1:1/0"))
    assert_error(await _probe(wiring, "/readyz"), 503, "SERVICE_UNAVAILABLE")


async def test_openapi_document_is_public_and_lists_every_endpoint(
    app: Any, client: httpx.AsyncClient
) -> None:
    response = await client.get("/api/v1/openapi.json")
    assert response.status_code == 200
    document = response.json()
    assert document["openapi"].startswith("3.")
    assert document["info"]["title"] == "signoff"
    paths: dict[str, dict[str, Any]] = document["paths"]
    routes = [r for r in _api_routes(app.router.routes) if r.include_in_schema]
    assert len(routes) >= 15, [r.path for r in routes]
    for route in routes:
        documented = {m.lower() for m in paths.get(route.path, {})}
        for method in route.methods - {"HEAD", "OPTIONS"}:
            assert method.lower() in documented, f"{method} {route.path} is not documented"
    core = {
        "/api/v1/approvals": {"get", "post"},
        "/api/v1/approvals/{request_id}": {"get", "patch", "delete"},
        "/api/v1/approvals/{request_id}/comments": {"get", "post"},
        "/api/v1/approvals/{request_id}/events": {"get"},
        "/api/v1/me": {"get"},
        "/api/v1/emergency-stop": {"get", "put"},
    }
    for path, methods in core.items():
        assert methods <= set(paths[path]), path
    # Bodies parsed by hand are documented too, and every reference resolves.
    create = paths["/api/v1/approvals"]["post"]["requestBody"]["content"]["application/json"]
    assert create["schema"]["$ref"] == "#/components/schemas/CreateApprovalRequest"
    schemas = document["components"]["schemas"]
    assert {"title", "description", "priority"} <= set(schemas["CreateApprovalRequest"]["required"])
    for ref in _references(document):
        name = ref.removeprefix("#/components/schemas/")
        assert name in schemas, f"dangling reference {ref}"
    assert document["components"]["securitySchemes"]["apiKey"]["scheme"] == "bearer"


def _api_routes(routes: list[Any]) -> list[APIRoute]:
    """Every endpoint, those of included routers too (FastAPI nests them)."""
    found: list[APIRoute] = []
    for route in routes:
        if isinstance(route, APIRoute):
            found.append(route)
        elif (nested := getattr(route, "original_router", None)) is not None:
            found += _api_routes(nested.routes)
        elif (nested_routes := getattr(route, "routes", None)) is not None:
            found += _api_routes(list(nested_routes))
    return found


def _references(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return found + [ref for value in node.values() for ref in _references(value)]
    if isinstance(node, list):
        return [ref for value in node for ref in _references(value)]
    return []


async def test_interactive_docs_are_served(client: httpx.AsyncClient) -> None:
    response = await client.get("/api/v1/docs")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    assert "/api/v1/openapi.json" in response.text


async def test_health_checks_answer_head(client: httpx.AsyncClient) -> None:
    for path in ("/healthz", "/readyz"):
        response = await client.head(path)
        assert response.status_code == 200, path
        assert response.content == b""


async def test_trailing_slashes_are_answered_not_redirected(
    client: httpx.AsyncClient, org: Org
) -> None:
    created = await client.post(
        "/api/v1/approvals/", headers=org.member.headers, json=approval_body()
    )
    assert created.status_code == 201, created.text
    listed = await client.get("/api/v1/approvals/", headers=org.member.headers)
    assert listed.status_code == 200
    assert listed.json()["total"] == 1
    assert (await client.get("/healthz/")).status_code == 200
