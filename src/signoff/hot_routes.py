"""The five busiest API calls, handed by the API guard straight to their ``LeanRoute``
handlers: a create, a list page, a get, a decision and a step's vote
(docs/decisions/0036, 0046).

Through the app, each of them also passed Starlette's ``ExceptionMiddleware``, FastAPI's
``AsyncExitStackMiddleware``, the router trying routes one by one, ``APIRoute.handle``,
FastAPI's ``request_response`` (two ``AsyncExitStack``) and Starlette's
``wrap_app_handling_exceptions`` (one more ``send`` wrapper), none of which does anything
for an endpoint that reads its own body and answers with a ready ``Response``. Here the
guard finds the route by method and path, sets in the scope what the router would
(``route``, ``endpoint``, ``path_params``), calls the route's lean handler and answers
an exception with the app's own handler for it, found as Starlette finds it, so the
answers are the same by construction. An exception with no handler goes on up, to the
guard's 500 envelope, as it did through the app.

The route is taken only when the router would take it: it is the route the app's list
gives for that method and path template, and no route ahead of it in the list matches
the call. Any other call, or one of these with a ``root_path``, goes through the app.

``SIGNOFF_STOCK_HOT_ROUTES=1`` in the environment when the app is made turns this off
(a measurement switch, ``make bench-replacements``); so do ``SIGNOFF_STOCK_ROUTES=1`` (no
lean handlers) and ``SIGNOFF_COMPAT_LEGACY_CLIENTS`` (its envelope layer sits between the
guard and the router).
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Match, Route
from starlette.types import Receive, Scope, Send

from signoff.common.routing import Handler, LeanRoute

STOCK_SWITCH = "SIGNOFF_STOCK_HOT_ROUTES"
# Method and path template of each call dispatched here.
HOT = (
    ("POST", "/api/v1/approvals"),
    ("GET", "/api/v1/approvals"),
    ("GET", "/api/v1/approvals/{request_id}"),
    ("PATCH", "/api/v1/approvals/{request_id}"),
    ("PATCH", "/api/v1/approvals/{request_id}/steps/{step_id}"),
)
_STARTED = "Caught handled exception, but response already started."  # Starlette's words
ExceptionHandler = Callable[[Request, Exception], Awaitable[Response]]


class _Answer(Protocol):
    started: bool


def enabled() -> bool:
    return os.environ.get(STOCK_SWITCH) != "1"


@dataclass(frozen=True)
class _Hot:
    route: LeanRoute
    handler: Handler
    # Routes ahead of this one in the app's list that might also take the method.
    ahead: tuple[BaseRoute, ...]

    def params(self, scope: Scope) -> dict[str, Any] | None:
        """The path parameters, as the router gives them; None when the router would
        not give this route the call."""
        path = scope["path"]
        matched = self.route.path_regex.match(path)
        if matched is None:
            return None
        for other in self.ahead:
            if isinstance(other, Route):
                if other.path_regex.match(path) is not None:
                    return None
            elif other.matches(scope)[0] is Match.FULL:
                return None
        convertors = self.route.param_convertors
        return {key: convertors[key].convert(value) for key, value in matched.groupdict().items()}


class HotRoutes:
    """The table the guard looks calls up in, made from the app's routes at its first
    call (the app's list, so that routes added after the app was made count too)."""

    def __init__(self, routes: Sequence[BaseRoute]) -> None:
        self._routes = routes
        self._by_method: dict[str, tuple[_Hot, ...]] | None = None
        self._handlers: dict[Any, ExceptionHandler] | None = None

    def _table(self) -> dict[str, tuple[_Hot, ...]]:
        table: dict[str, list[_Hot]] = {}
        for method, template in HOT:
            for index, route in enumerate(self._routes):
                if (
                    isinstance(route, LeanRoute)
                    and route.path == template
                    and method in (route.methods or ())
                ):
                    if route.lean is not None:
                        ahead = tuple(
                            other
                            for other in self._routes[:index]
                            if not isinstance(other, Route)
                            or other.methods is None  # every method
                            or method in other.methods
                        )
                        table.setdefault(method, []).append(_Hot(route, route.lean, ahead))
                    break
        return {method: tuple(hot) for method, hot in table.items()}

    def find(self, scope: Scope) -> tuple[_Hot, dict[str, Any]] | None:
        by_method = self._by_method
        if by_method is None:
            by_method = self._by_method = self._table()
        candidates = by_method.get(scope["method"])
        if candidates is None or scope.get("root_path"):
            return None
        for hot in candidates:
            params = hot.params(scope)
            if params is not None:
                return hot, params
        return None

    async def call(
        self,
        found: tuple[_Hot, dict[str, Any]],
        scope: Scope,
        receive: Receive,
        send: Send,
        answer: _Answer,
    ) -> None:
        """What the router, the route and FastAPI's handler wrapper would do with the
        call: the lean handler, and an exception answered by the app's handler for it.
        ``answer``: says whether the answer has begun."""
        hot, params = found
        scope["route"] = hot.route
        scope["endpoint"] = hot.route.endpoint
        scope["path_params"] = params
        request = Request(scope, receive, send)
        try:
            response = await hot.handler(request)
            await response(scope, receive, send)
        except Exception as exc:
            handler = self._handler_for(scope, exc)
            if handler is None:
                raise
            if answer.started:
                raise RuntimeError(
                    "Caught handled exception, but response already started."
                ) from exc
            response = await handler(request, exc)
            await response(scope, receive, send)
            # Reused exception instances accumulate tracebacks across requests.
            exc.__traceback__ = None

    def _handler_for(self, scope: Scope, exc: Exception) -> ExceptionHandler | None:
        """The handler Starlette's ``ExceptionMiddleware`` would use: for an
        ``HTTPException`` the one of its status, if any; then by class, the nearest in
        the exception's MRO. ``Exception`` and 500 are the outer layer's, so not here."""
        handlers = self._handlers
        if handlers is None:
            handlers = self._handlers = {
                key: value
                for key, value in scope["app"].exception_handlers.items()
                if key not in (Exception, 500)
            }
        if isinstance(exc, HTTPException) and exc.status_code in handlers:
            return handlers[exc.status_code]
        for cls in type(exc).__mro__:
            if cls in handlers:
                return handlers[cls]
        return None
