"""The route class of every router: FastAPI documents a route, a lean handler runs it.

Our endpoints parse and validate their own input (validation.py: the error envelope with
every field's problem, and the request's limits) and answer with ready ``Response``
objects. FastAPI's per-call machinery (solving dependencies, validating each parameter
through Pydantic) then only hands strings over, at a large share of a read's CPU
(docs/decisions/0005-leanroute.md). For an
endpoint whose parameters are all of the kinds below, ``LeanRoute`` calls it with those
strings directly; FastAPI still builds the OpenAPI document from the same signature. Any
other endpoint runs through FastAPI's own handler.

The kinds: the ``Request``; path parameters declared as ``str``; query parameters declared
as ``str | None`` (what FastAPI would pass: the last value, or the default); and a
``require_scope`` dependency, which yields the caller or refuses the call.

What it earns is measured against FastAPI's own handler (``make bench-replacements``;
docs/performance.md, *Hand-written replacements*): with
``SIGNOFF_STOCK_ROUTES=1`` in the environment when the routes are built, every route runs
through FastAPI's handler. That switch is for that measurement only.
"""

from __future__ import annotations

import inspect
import os
import types
from collections.abc import Callable, Coroutine
from typing import Any, Union, cast, get_args, get_origin, get_type_hints

from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response

from signoff.common.http import principal_with_scope, scope_of_dependency

Handler = Callable[[Request], Coroutine[Any, Any, Response]]
# The measurement switch (see the module's docstring): FastAPI's handler for every route.
STOCK_SWITCH = "SIGNOFF_STOCK_ROUTES"


class LeanRoute(APIRoute):
    # The lean handler, if the route has one (the API guard calls some directly:
    # hot_routes.py).
    lean: Handler | None = None

    def get_route_handler(self) -> Handler:
        if os.environ.get(STOCK_SWITCH) == "1":
            return super().get_route_handler()
        self.lean = _lean_handler(self.dependant)
        return self.lean or super().get_route_handler()


def _lean_handler(dependant: Dependant) -> Handler | None:
    if not _is_lean(dependant):
        return None
    endpoint = dependant.call
    assert endpoint is not None
    request_name = dependant.request_param_name
    path_names = [(field.name, field.alias) for field in dependant.path_params]
    query_names = [(field.name, field.alias, field.default) for field in dependant.query_params]
    scopes = [
        (cast(str, dep.name), cast(str, scope_of_dependency(dep.call)))
        for dep in dependant.dependencies
    ]

    async def handler(request: Request) -> Response:
        arguments: dict[str, Any] = {}
        if request_name is not None:
            arguments[request_name] = request
        for name, scope in scopes:
            arguments[name] = principal_with_scope(request, scope)
        path_params = request.path_params
        for name, alias in path_names:
            arguments[name] = path_params[alias]
        if query_names and request.scope.get("query_string"):
            query_params = request.query_params
            for name, alias, default in query_names:
                arguments[name] = query_params.get(alias, default)
        else:
            # No query string: every parameter takes its default, and Starlette's parsing
            # of the empty string, a measurable share of a get, is left out.
            for name, _, default in query_names:
                arguments[name] = default
        response: Response = await endpoint(**arguments)
        return response

    return handler


def _is_lean(dependant: Dependant) -> bool:
    other_kinds = (
        dependant.header_params,
        dependant.cookie_params,
        dependant.body_params,
        dependant.websocket_param_name,
        dependant.http_connection_param_name,
        dependant.response_param_name,
        dependant.background_tasks_param_name,
        dependant.security_scopes_param_name,
    )
    return (
        not any(other_kinds)
        and all(_is_type(field.field_info.annotation, str) for field in dependant.path_params)
        and all(_is_optional_str(field.field_info.annotation) for field in dependant.query_params)
        and all(
            dep.name is not None and scope_of_dependency(dep.call) is not None
            for dep in dependant.dependencies
        )
        and _answers_with_a_response(dependant.call)
    )


def _answers_with_a_response(call: Callable[..., Any] | None) -> bool:
    """An async endpoint annotated to return a ``Response``, which is sent as it is."""
    if call is None or not inspect.iscoroutinefunction(call):
        return False
    try:
        returned = get_type_hints(call).get("return")
    except (NameError, TypeError):
        return False
    return isinstance(returned, type) and issubclass(returned, Response)


def _is_type(annotation: Any, expected: type) -> bool:
    return annotation is expected


def _is_optional_str(annotation: Any) -> bool:
    return get_origin(annotation) in (Union, types.UnionType) and set(get_args(annotation)) == {
        str,
        type(None),
    }
