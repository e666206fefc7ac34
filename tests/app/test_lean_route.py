"""LeanRoute (src/signoff/common/routing.py): which endpoints skip FastAPI's per-call
machinery, and that both kinds receive what FastAPI would have passed them."""

from __future__ import annotations

from typing import Annotated

import httpx
import pytest
from fastapi import APIRouter, Depends, FastAPI, Query
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from signoff.auth.principal import Principal
from signoff.common.http import require_scope
from signoff.common.routing import STOCK_SWITCH, LeanRoute, _lean_handler
from signoff.errors import AppError

Reader = Annotated[Principal, Depends(require_scope("approvals:read"))]
router = APIRouter(route_class=LeanRoute)


@router.get("/lean/{item_id}")
async def lean(
    request: Request,
    item_id: str,
    principal: Reader,
    wait: str | None = Query(None),
    tag: str | None = Query("none"),
) -> Response:
    return JSONResponse(
        {
            "item": item_id,
            "wait": wait,
            "tag": tag,
            "user": principal.user_email,
            "path": request.url.path,
        }
    )


@router.get("/typed")
async def typed(count: int = Query(...)) -> Response:
    return JSONResponse({"count": count})


@router.get("/plain")
async def plain() -> dict[str, str]:
    return {"answer": "not a Response: FastAPI serializes it"}


def _app(scopes: tuple[str, ...], routes: APIRouter = router) -> FastAPI:
    app = FastAPI()
    app.include_router(routes)

    @app.middleware("http")
    async def authenticate(request: Request, call_next):  # type: ignore[no-untyped-def]
        request.scope.setdefault("state", {})["principal"] = _principal(scopes)
        return await call_next(request)

    @app.exception_handler(AppError)
    async def envelope(_: Request, error: AppError) -> Response:
        return JSONResponse(error.to_body(), error.status_code)

    return app


def _principal(scopes: tuple[str, ...]) -> Principal:
    import uuid

    return Principal(
        org_id=uuid.uuid4(),
        org_name="Acme",
        org_emergency_stop=False,
        connection_id=uuid.uuid4(),
        connection_name="c",
        rate_limit_per_hour=100,
        user_id=uuid.uuid4(),
        user_email="a@acme.example",
        user_name="A",
        role="member",
        org_self_approval="allow",
        scopes=scopes,
    )


def _route(path: str) -> LeanRoute:
    return next(r for r in router.routes if getattr(r, "path", None) == path)  # type: ignore[return-value]


def test_only_endpoints_of_the_lean_kinds_get_the_lean_handler() -> None:
    assert _lean_handler(_route("/lean/{item_id}").dependant) is not None
    assert _lean_handler(_route("/typed").dependant) is None  # an int: FastAPI validates it
    assert _lean_handler(_route("/plain").dependant) is None  # not a Response


async def test_a_lean_endpoint_gets_what_fastapi_would_pass() -> None:
    transport = httpx.ASGITransport(app=_app(("approvals:read",)))
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        answer = await client.get("/lean/abc", params=[("wait", "1"), ("wait", "5")])
        assert answer.json() == {
            "item": "abc",
            "wait": "5",  # the last value, as FastAPI passes a single-valued parameter
            "tag": "none",  # the declared default
            "user": "a@acme.example",
            "path": "/lean/abc",
        }
        assert (await client.get("/lean/abc?wait=")).json()["wait"] == ""


async def test_without_a_query_string_every_query_parameter_takes_its_default() -> None:
    transport = httpx.ASGITransport(app=_app(("approvals:read",)))
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        answer = (await client.get("/lean/abc")).json()
        assert (answer["wait"], answer["tag"]) == (None, "none")
        # A query string naming neither parameter: the defaults again.
        answer = (await client.get("/lean/abc?other=1")).json()
        assert (answer["wait"], answer["tag"]) == (None, "none")


async def test_a_lean_endpoint_still_refuses_a_missing_scope() -> None:
    transport = httpx.ASGITransport(app=_app(("comments:write",)))
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        answer = await client.get("/lean/abc")
    assert answer.status_code == 403
    assert answer.json()["error"]["code"] == "INSUFFICIENT_SCOPE"


async def test_other_endpoints_run_through_fastapi() -> None:
    transport = httpx.ASGITransport(app=_app(("approvals:read",)))
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        assert (await client.get("/typed?count=3")).json() == {"count": 3}
        assert (await client.get("/typed?count=x")).status_code == 422
        assert (await client.get("/plain")).json() == {
            "answer": "not a Response: FastAPI serializes it"
        }


def test_the_openapi_document_still_describes_lean_parameters() -> None:
    operation = _app(("approvals:read",)).openapi()["paths"]["/lean/{item_id}"]["get"]
    names = {parameter["name"] for parameter in operation["parameters"]}
    assert names == {"item_id", "wait", "tag"}


async def test_the_measurement_switch_hands_every_route_to_fastapi_with_the_same_answers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``SIGNOFF_STOCK_ROUTES=1`` (make bench-replacements' B side): FastAPI's handler."""
    assert "_lean_handler" in _route("/lean/{item_id}").get_route_handler().__qualname__
    lean_app = _app(("approvals:read",))  # built before the switch: its routes stay lean
    monkeypatch.setenv(STOCK_SWITCH, "1")
    stock = APIRouter(route_class=LeanRoute)
    stock.add_api_route("/lean/{item_id}", lean, methods=["GET"])
    stock_route = next(r for r in stock.routes if isinstance(r, LeanRoute))
    assert "_lean_handler" not in stock_route.get_route_handler().__qualname__
    answers = []
    for app in (lean_app, _app(("approvals:read",), stock)):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            answer = await client.get("/lean/abc", params=[("wait", "1"), ("wait", "5")])
            answers.append((answer.status_code, answer.json()))
    assert answers[0] == answers[1]
    assert answers[0][0] == 200
