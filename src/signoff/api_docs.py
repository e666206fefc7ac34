"""The OpenAPI document at ``/api/v1/openapi.json`` and the API docs page at ``/api/v1/docs``.

The document is true to what the service answers. Routes name the refusals of their own
(``responses=errors(...)``, common/openapi_declarations.py); the ones every ``/api/v1``
call may meet come from the middleware (middleware.py) and are added to each operation
here: 401 and 429 from the guard, 403 INSUFFICIENT_SCOPE where a route asks for a scope,
403 OWNER_DEACTIVATED where a connection whose owner is deactivated may not act
(auth/authority.py), 503 EMERGENCY_STOP on writes, 413 on bodies, and the
``X-RateLimit-*`` headers on every answer. FastAPI's default 422 is dropped: bodies and
queries are validated by ``validation.py`` and refused with 400 VALIDATION_ERROR.

The docs page is Swagger UI served from the ``swagger-ui-bundle-v2`` package (Swagger UI 5,
which reads OpenAPI 3.1) by the app itself: it works without internet access.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
from collections.abc import Iterable
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.staticfiles import StaticFiles
from swagger_ui_bundle import swagger_ui_path

from signoff import __version__
from signoff.auth.authority import reach_without_owner
from signoff.common.http import DOCUMENTED_BODIES, scope_of_dependency
from signoff.common.openapi_declarations import (
    CODES_KEY,
    DOCUMENT_MODELS,
    RATE_LIMIT_HEADERS,
    RETRY_AFTER_HEADER,
    error_response,
)
from signoff.errors import (
    AppError,
    EmergencyStopActive,
    InsufficientScope,
    OwnerDeactivated,
    PayloadTooLarge,
    RateLimited,
    Unauthorized,
)
from signoff.middleware import API_PREFIX, EMERGENCY_STOP_PATH, PUBLIC_API_PATHS, WRITE_METHODS
from signoff.oauth.pages import SCOPE_DESCRIPTIONS

OPENAPI_URL = "/api/v1/openapi.json"
DOCS_URL = "/api/v1/docs"
# Outside /api/v1: the assets need no credentials and count against no rate limit.
ASSETS_URL = "/static/swagger-ui"

API_DESCRIPTION = """\
signoff asks a human before automations and AI agents act. Create an approval request,
let people approve or reject it, and receive the decision as a signed callback.

Authenticate with `Authorization: Bearer gk_...` (a connection's API key), or with an OAuth
2.0 access token `oat_...` obtained with PKCE at `/oauth/authorize` and `/oauth/token`: it
acts as the person who consented, with the scopes they granted. An API key acts as its
connection's owner: while that person is deactivated, it still creates, reads, comments on
and cancels its own requests, and anything else answers 403 `OWNER_DEACTIVATED` until an
admin transfers the connection (`POST /api/v1/connections/{id}/transfer`). Errors are
`{"error": {"code", "message", "details"}}`; each operation lists the statuses and codes
it can answer. Every response carries `X-RateLimit-Limit`, `X-RateLimit-Remaining` and
`X-RateLimit-Reset`; a 429 adds `Retry-After`.

Limits shown in the schemas (text lengths, counts) are the defaults; an operator may
change them (docs/configuration.md). What each field accepts: docs/input-rules.md.
"""


def _oauth2_security_scheme() -> dict[str, Any]:
    """OAuth 2.0 with PKCE (docs/oauth.md); the scope each operation needs is in its docs."""
    return {
        "type": "oauth2",
        "description": "Authorization code with PKCE (S256). Discovery: "
        "/.well-known/oauth-authorization-server.",
        "flows": {
            "authorizationCode": {
                "authorizationUrl": "/oauth/authorize",
                "tokenUrl": "/oauth/token",
                "refreshUrl": "/oauth/token",
                "scopes": dict(SCOPE_DESCRIPTIONS),
            }
        },
    }


def build_document(app: FastAPI) -> dict[str, Any]:
    if app.openapi_schema:
        return app.openapi_schema
    document = get_openapi(
        title="signoff", version=__version__, description=API_DESCRIPTION, routes=app.routes
    )
    components = document.setdefault("components", {})
    schemas = components.setdefault("schemas", {})
    for unused in ("HTTPValidationError", "ValidationError"):
        schemas.pop(unused, None)
    for model in (*DOCUMENTED_BODIES.values(), *DOCUMENT_MODELS):
        model_schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
        schemas.update(model_schema.pop("$defs", {}))
        schemas[model.__name__] = model_schema
    components["securitySchemes"] = {
        "apiKey": {"type": "http", "scheme": "bearer", "description": "gk_ + 64 hex"},
        "oauth2": _oauth2_security_scheme(),
    }
    document["security"] = [{"apiKey": []}, {"oauth2": []}]
    _document_statuses(app, document)
    app.openapi_schema = document
    return document


def _document_statuses(app: FastAPI, document: dict[str, Any]) -> None:
    """Every ``/api/v1`` operation with the statuses it really answers (see the module)."""
    paths: dict[str, dict[str, Any]] = document.get("paths", {})
    for route in app.routes:
        if not isinstance(route, APIRoute) or not route.include_in_schema:
            continue
        for method in route.methods or ():
            operation = paths.get(route.path_format, {}).get(method.lower())
            if operation is None:
                continue
            operation.get("responses", {}).pop("422", None)
            if not route.path.startswith(API_PREFIX + "/") or route.path in PUBLIC_API_PATHS:
                continue
            _add_errors(operation, _common_refusals(route, method, operation))
            _add_rate_limit_headers(operation)


def _common_refusals(
    route: APIRoute, method: str, operation: dict[str, Any]
) -> list[type[AppError]]:
    """What the middleware and the route's dependencies may answer before the handler."""
    refusals: list[type[AppError]] = [Unauthorized, RateLimited]
    if any(scope_of_dependency(dep.call) for dep in route.dependant.dependencies):
        refusals.append(InsufficientScope)
    if reach_without_owner(method, route.path) != "all":
        refusals.append(OwnerDeactivated)
    if method in WRITE_METHODS and route.path != EMERGENCY_STOP_PATH:
        refusals.append(EmergencyStopActive)
    if "requestBody" in operation:
        refusals.append(PayloadTooLarge)
    return refusals


def _add_errors(operation: dict[str, Any], refusals: Iterable[type[AppError]]) -> None:
    responses: dict[str, Any] = operation.setdefault("responses", {})
    for refusal in refusals:
        key = str(refusal.status_code)
        known = responses.get(key, {}).get(CODES_KEY, [])
        responses[key] = error_response(refusal.status_code, [*known, refusal.code])


def _add_rate_limit_headers(operation: dict[str, Any]) -> None:
    for status, response in operation.get("responses", {}).items():
        headers = response.setdefault("headers", {})
        for name, header in RATE_LIMIT_HEADERS.items():
            headers.setdefault(name, {**header, "required": True})
        if status == "429":
            headers["Retry-After"] = RETRY_AFTER_HEADER


# ---- the docs page ----

_INIT_SCRIPT = """\
window.onload = function () {
  window.ui = SwaggerUIBundle({
    url: %(openapi_url)s,
    dom_id: "#swagger-ui",
    deepLinking: true,
    validatorUrl: null,
    oauth2RedirectUrl: window.location.origin + %(redirect_url)s,
    presets: [SwaggerUIBundle.presets.apis, SwaggerUIBundle.SwaggerUIStandalonePreset],
    layout: "BaseLayout",
  });
  window.ui.initOAuth({ usePkceWithAuthorizationCodeGrant: true });
};
"""


def _docs_page() -> tuple[str, str]:
    """The page and its Content-Security-Policy: only our own scripts run, the one inline
    script by its hash."""
    script = _INIT_SCRIPT % {
        "openapi_url": json.dumps(OPENAPI_URL),
        "redirect_url": json.dumps(f"{ASSETS_URL}/oauth2-redirect.html"),
    }
    digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
    assets = html.escape(ASSETS_URL)
    page = f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>signoff API</title>
<link rel="stylesheet" href="{assets}/swagger-ui.css">
<link rel="icon" type="image/png" href="{assets}/favicon-32x32.png">
</head>
<body>
<div id="swagger-ui"></div>
<script src="{assets}/swagger-ui-bundle.js"></script>
<script>{script}</script>
</body>
</html>
"""
    policy = (
        "default-src 'none'; "
        f"script-src 'self' 'sha256-{digest}'; "
        # Swagger UI sets style attributes from its scripts.
        "style-src 'self' 'unsafe-inline'; "
        "img-src 'self' data:; font-src 'self' data:; connect-src 'self'; "
        "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    )
    return page, policy


def install_docs(app: FastAPI) -> None:
    """``/api/v1/openapi.json``, ``/api/v1/docs`` and the Swagger UI assets it loads."""
    page, policy = _docs_page()
    headers = {"Content-Security-Policy": policy, "Cache-Control": "no-cache"}

    async def openapi_json(_: Request) -> Response:
        return Response(json.dumps(build_document(app)).encode(), media_type="application/json")

    async def docs(_: Request) -> Response:
        return HTMLResponse(page, headers=headers)

    app.add_route(OPENAPI_URL, openapi_json, include_in_schema=False)
    app.add_route(DOCS_URL, docs, include_in_schema=False)
    app.mount(ASSETS_URL, StaticFiles(directory=str(swagger_ui_path)), name="swagger-ui")
    app.openapi = lambda: build_document(app)  # type: ignore[method-assign]
