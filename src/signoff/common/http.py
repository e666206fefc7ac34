"""Small helpers every router uses: JSON answers, the caller, scopes, path ids."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import Response

from signoff.auth.authority import check_authority
from signoff.auth.principal import Principal, PrincipalCheck
from signoff.common.ids import parse_id
from signoff.errors import InsufficientScope, NotFound, Unauthorized


def json_response(
    data: Any, status_code: int = 200, headers: dict[str, str] | None = None
) -> Response:
    return Response(orjson.dumps(data), status_code, headers, media_type="application/json")


def principal_of(request: Request) -> Principal:
    """The caller, if they may call this route at all: a connection whose owner is
    deactivated is refused what needs that person's authority (``auth.authority``)."""
    principal = request.scope.get("state", {}).get("principal")
    if not isinstance(principal, Principal):
        raise Unauthorized()
    if principal.owner_deactivated:
        route = request.scope.get("route")
        check_authority(principal, request.method, getattr(route, "path", ""))
    return principal


def require_scope(scope: str) -> Callable[[Request], Awaitable[Principal]]:
    """A dependency: the caller, if their credentials carry ``scope`` (decisions.md 11).

    A coroutine on purpose: FastAPI runs a plain ``def`` dependency in a worker thread,
    and that hand-off cost more than the rest of a read
    (docs/decisions/0020-what-a-create-pays-for.md).
    """

    async def dependency(request: Request) -> Principal:
        return principal_with_scope(request, scope)

    dependency.__name__ = f"require_{scope.replace(':', '_')}"
    # How routing.LeanRoute knows it, and resolves it without FastAPI's machinery.
    dependency.required_scope = scope  # type: ignore[attr-defined]
    return dependency


def principal_with_scope(request: Request, scope: str) -> Principal:
    principal = principal_of(request)
    if scope not in principal.scopes:
        raise InsufficientScope(scope)
    return principal


def scope_of_dependency(call: Callable[..., Any] | None) -> str | None:
    """The scope a ``require_scope`` dependency asks for; None for any other callable."""
    scope = getattr(call, "required_scope", None)
    return scope if isinstance(scope, str) else None


def path_id(value: str, what: str = "approval request") -> uuid.UUID:
    """A path id; anything that is not a UUID names nothing, so it is a 404."""
    parsed = parse_id(value)
    if parsed is None:
        raise NotFound(f"No {what} with this id.")
    return parsed


def json_body_doc(model: type[BaseModel]) -> dict[str, Any]:
    """``openapi_extra`` documenting a JSON body we parse ourselves (see validation.py)."""
    DOCUMENTED_BODIES[model.__name__] = model
    return {
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {"schema": {"$ref": f"#/components/schemas/{model.__name__}"}}
            },
        }
    }


DOCUMENTED_BODIES: dict[str, type[BaseModel]] = {}


def principal_check_of(request: Request) -> PrincipalCheck | None:
    """The check the call's first statement must make of its principal, if the principal
    came from memory (``auth.principal.PrincipalCheck``); None once it is confirmed."""
    check = request.scope.get("state", {}).get("principal_check")
    return check if isinstance(check, PrincipalCheck) and not check.confirmed else None
