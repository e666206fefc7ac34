"""The ASGI application: routers, the error envelope, middleware and background work."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import APIRouter, FastAPI
from fastapi.exceptions import RequestValidationError
from fastapi.telemetry import TelemetryConfig
from opentelemetry import _logs, metrics, trace
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Match

from signoff import __version__, hot_routes
from signoff.api_docs import install_docs
from signoff.approvals.endpoints import router as approvals_router
from signoff.audit.endpoints import router as audit_router
from signoff.common.http import json_response
from signoff.common.openapi_declarations import errors
from signoff.common.validation import validation_failed_from
from signoff.compat.endpoints import router as legacy_clients_router
from signoff.compat.middleware import LegacyDataEnvelope
from signoff.config import Settings, get_settings
from signoff.context import context_of
from signoff.dashboard import error_pages
from signoff.dashboard.endpoints import install_dashboard
from signoff.errors import (
    AppError,
    MethodNotAllowed,
    NotFound,
    PasskeyRequired,
    ServiceUnavailable,
)
from signoff.groups.endpoints import router as groups_router
from signoff.groups.pages import pages as group_pages
from signoff.hot_routes import HotRoutes
from signoff.metrics import HTTP_STATS
from signoff.middleware import ApiGuard
from signoff.notifications.endpoints import router as notifications_router
from signoff.notifications.pages import pages as notification_pages
from signoff.notifications.slack_webhook import webhook as slack_webhook
from signoff.oauth.endpoints import api_router as oauth_api_router
from signoff.oauth.endpoints import documented_router as oauth_documented_router
from signoff.oauth.endpoints import router as oauth_router
from signoff.oauth.endpoints import token_router as oauth_token_router
from signoff.operations.endpoints import router as metrics_router
from signoff.operations.service import check_ready
from signoff.orgs.endpoints import router as orgs_router
from signoff.orgs.settings_endpoints import router as org_settings_router
from signoff.policies.endpoints import router as policies_router
from signoff.policies.pages import pages as policy_pages
from signoff.policies.standing_endpoints import router as standing_router
from signoff.receipts.endpoints import router as receipts_router
from signoff.remote_mcp.server import RemoteMcp
from signoff.retention.service import run_retention
from signoff.steps.endpoints import router as steps_router
from signoff.webhooks.endpoints import router as webhooks_router
from signoff.wiring import Wiring
from signoff.worker.audit_chain import run_audit_sealer
from signoff.worker.deliveries import run_delivery_worker
from signoff.worker.notifications import run_notification_sender
from signoff.worker.sweeper import run_expiry_sweep

logger = logging.getLogger(__name__)


def _error_response(error: AppError) -> Response:
    return json_response(error.to_body(), error.status_code, error.headers or None)


async def _answer(request: Request, error: AppError) -> Response:
    """The envelope, or for a browser outside the API a page (``dashboard.error_pages``)."""
    if error_pages.wants_page(request):
        page = await error_pages.error_page(request, error)
        if page is not None:
            return page
    return _error_response(error)


_PROBED_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")


def _allowed_methods(request: Request) -> set[str]:
    """The methods some route serves on this path (asked of the router, so routes of
    included routers count too)."""
    routes = request.app.router.routes
    return {
        method
        for method in _PROBED_METHODS
        if any(
            route.matches({**request.scope, "method": method})[0] is Match.FULL for route in routes
        )
    }


def _install_error_handlers(app: FastAPI) -> None:
    async def on_app_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, AppError)
        if isinstance(exc, PasskeyRequired) and "url" not in exc.details:
            # The page where the person can sign the decision with their passkey.
            public_url = context_of(request).settings.public_url
            exc.details["url"] = f"{public_url}/requests/{exc.details['request_id']}"
        return await _answer(request, exc)

    async def on_validation_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        fields = [
            {
                "field": ".".join(str(p) for p in e["loc"] if p not in ("body", "query", "path")),
                "message": str(e["msg"]),
            }
            for e in exc.errors()
        ]
        from signoff.errors import ValidationFailed

        return await _answer(request, ValidationFailed.for_fields(fields))

    async def on_http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        error: AppError
        if exc.status_code == 404:
            error = NotFound("No such resource.")
        elif exc.status_code == 405:
            error = MethodNotAllowed()
        else:
            error = AppError(str(exc.detail))
            error.status_code = exc.status_code  # type: ignore[misc]
        if exc.headers:
            error.headers.update(exc.headers)
        if exc.status_code == 405:
            # Starlette names the methods of the first route on the path only; a path
            # served by several routes (GET and POST /approvals) allows all of theirs.
            error.headers["Allow"] = ", ".join(sorted(_allowed_methods(request)))
        return await _answer(request, error)

    async def on_unexpected(request: Request, exc: Exception) -> Response:
        logger.error("unhandled error", exc_info=exc)
        return await _answer(request, AppError())

    app.add_exception_handler(AppError, on_app_error)
    app.add_exception_handler(RequestValidationError, on_validation_error)
    app.add_exception_handler(StarletteHTTPException, on_http_error)
    app.add_exception_handler(Exception, on_unexpected)
    _ = validation_failed_from  # re-exported for routers that validate by hand


def _install_health(app: FastAPI, wiring: Wiring) -> None:
    @app.get("/healthz", tags=["operations"], summary="The process is up")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get(
        "/readyz",
        tags=["operations"],
        summary="The database answers at the latest migration, Redis answers, and the "
        "background loops run",
        responses=errors(ServiceUnavailable),
    )
    async def readyz() -> Response:
        await check_ready(wiring.ctx, wiring.limiter, app.state.background)
        return json_response({"status": "ready"})

    # HEAD too: many load balancers health-check with it.
    app.add_api_route("/healthz", healthz, methods=["HEAD"], include_in_schema=False)
    app.add_api_route("/readyz", readyz, methods=["HEAD"], include_in_schema=False)


def _add_routes(app: FastAPI, *routers: APIRouter) -> None:
    """The routers' routes, put in the app's own list, in order and ahead of FastAPI's
    (the OpenAPI document and the docs pages): routes are tried one by one, and the
    busiest paths, the approvals', are then tried first.

    ``include_router`` keeps each router as a nested one, matched twice per call (once to
    pick the router, once inside it), a share of every call's CPU
    (docs/decisions/0005-leanroute.md).
    Our routers carry no dependencies or settings of their own to inherit: their prefix
    is already part of every route's path.
    """
    for router in routers:
        assert not router.dependencies, "a router's dependencies would be lost here"
    app.router.routes[:0] = [route for router in routers for route in router.routes]


# The classes OpenTelemetry's API answers while no provider has been set up (FastAPI's own
# test, ``fastapi.telemetry._api``): the API has no public "is it configured" query.
_UNSET_PROVIDERS = frozenset(
    {
        ("opentelemetry.trace", "ProxyTracerProvider"),
        ("opentelemetry.metrics._internal", "_ProxyMeterProvider"),
        ("opentelemetry._logs._internal", "ProxyLoggerProvider"),
    }
)


def _set_up(provider: object) -> bool:
    kind = type(provider)
    return (kind.__module__, kind.__name__) not in _UNSET_PROVIDERS


def fastapi_telemetry() -> TelemetryConfig:
    """FastAPI's own OpenTelemetry spans, metrics and logs, each on if its provider was set
    up before the app is made (``opentelemetry-instrument signoff serve`` does so at
    start), off otherwise.

    Why: left on, FastAPI asks OpenTelemetry on every request whether each of the three
    providers has been set up meanwhile, a share of every API call's CPU in a server
    that sets none up. Asked once here instead."""
    return {
        "tracing": _set_up(trace.get_tracer_provider()),
        "metrics": _set_up(metrics.get_meter_provider()),
        "logs": _set_up(_logs.get_logger_provider()),
    }


def create_app(
    settings: Settings | None = None, *, wiring: Wiring | None = None, background: bool = True
) -> FastAPI:
    """The app. ``background=False`` leaves out the sweep and the delivery worker (API-only
    replicas, some tests); attempt 1 of this process's own decisions is still made here.

    ``wiring``: the process's services (wiring.py), built from ``settings`` if not given;
    the app closes them when its lifespan ends."""
    settings = settings or get_settings()
    wiring = wiring or Wiring.from_settings(settings)
    ctx = wiring.ctx

    @asynccontextmanager
    async def lifespan(application: FastAPI) -> AsyncIterator[None]:
        stop = asyncio.Event()
        tasks = (
            [
                asyncio.create_task(
                    run_expiry_sweep(ctx, wiring.poisoned, stop), name="expiry sweep"
                ),
                asyncio.create_task(
                    run_delivery_worker(ctx, wiring.webhooks, wiring.hub, stop),
                    name="delivery worker",
                ),
                asyncio.create_task(
                    run_notification_sender(wiring.notifications, wiring.hub, stop),
                    name="notification sender",
                ),
                asyncio.create_task(run_audit_sealer(ctx, stop), name="audit sealer"),
            ]
            if background
            else []
        )
        if background:
            # Spent budget windows every hour; old requests too with SIGNOFF_RETENTION_DAYS.
            tasks.append(asyncio.create_task(run_retention(ctx, stop), name="retention"))
        application.state.background = tasks  # /readyz checks they still run
        try:
            async with remote_mcp.running():
                yield
        finally:
            stop.set()
            await asyncio.gather(*tasks, return_exceptions=True)
            await wiring.close()

    app = FastAPI(
        title="signoff",
        version=__version__,
        # Both served by api_docs.install_docs: the document as it is, the page offline.
        openapi_url=None,
        docs_url=None,
        redoc_url=None,
        lifespan=lifespan,
        telemetry=fastapi_telemetry(),
    )
    app.state.ctx = ctx
    app.state.wiring = wiring
    app.state.background = []
    _install_error_handlers(app)
    _add_routes(
        app,
        approvals_router,
        oauth_token_router,
        orgs_router,
        org_settings_router,
        oauth_router,
        oauth_documented_router,
        oauth_api_router,
        steps_router,
        webhooks_router,
        notifications_router,
        policies_router,
        standing_router,
        groups_router,
        audit_router,
        notification_pages,
        policy_pages,
        group_pages,
        slack_webhook,
        receipts_router,
    )
    if settings.compat_legacy_clients:
        _add_routes(app, legacy_clients_router)
    _install_health(app, wiring)
    remote_mcp = RemoteMcp(app, settings)
    # Right after the approvals' routes: routes are tried one by one, and a task poll
    # (tasks/get on /mcp) is called as often as an approval's read; behind every other
    # API route, matching them alone cost it most of what the read costs.
    after_approvals = len(approvals_router.routes)
    app.router.routes[after_approvals:after_approvals] = remote_mcp.routes()
    if settings.metrics_enabled:
        # After the API's routes: a scrape every few seconds need not be tried first.
        app.router.routes.extend(metrics_router.routes)
    install_docs(app)
    install_dashboard(app)  # the server-rendered pages, after the API's routes
    if settings.compat_legacy_clients:
        app.add_middleware(LegacyDataEnvelope)
    # One layer for slashes, request ids, stats, the guard and the body limit: each layer
    # wraps `send` again, and on the write path those wrappers cost (middleware.py).
    app.add_middleware(
        ApiGuard,
        wiring=wiring,
        max_bytes=settings.max_body_bytes,
        stats=HTTP_STATS if settings.metrics_enabled else None,
        routes=app.router.routes,
        # The busiest calls, straight to their handlers (hot_routes.py); not past the
        # legacy envelope's layer.
        hot=HotRoutes(app.router.routes)
        if hot_routes.enabled() and not settings.compat_legacy_clients
        else None,
    )
    return app
