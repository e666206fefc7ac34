"""Prometheus metrics: the process's instruments, and the middleware that times requests.

Counters and histograms live in one registry for the process (``REGISTRY``), updated where
things happen: a request (``RequestMetrics``), a final transition
(``count_decision``), a callback attempt (``count_callback_attempt``), a row parked by
poison-row isolation (``count_poisoned_row``). Values read from the database (queue depth,
sweep lag) and the pool's use are computed when ``/metrics`` is scraped
(``operations/endpoints.py``), so nothing on the request path writes them.

Per request the middleware makes one counter increment and one histogram observation,
through label children cached by (method, route, status): ``labels()`` takes a lock and
builds a key each call. The route label is the route's template
(``/api/v1/approvals/{request_id}``), never the raw path, so the number of series stays
bounded whatever callers send.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.exposition import generate_latest
from prometheus_client.process_collector import ProcessCollector
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

REGISTRY = CollectorRegistry(auto_describe=True)
ProcessCollector(registry=REGISTRY)

# Requests answered before routing (authentication, rate limits) are matched against the
# routes afterwards; what matches no route at all is counted under this one label.
UNMATCHED_ROUTE = "unmatched"
# Any other method a caller sends is counted as "other": labels stay a bounded set.
KNOWN_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})

# Seconds. Most answers take milliseconds; long polls (``?wait=``) take up to a minute.
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0, 60.0)

HTTP_REQUESTS = Counter(
    "signoff_http_requests",
    "HTTP requests answered, by method, route template and status.",
    ("method", "route", "status"),
    registry=REGISTRY,
)
HTTP_LATENCY = Histogram(
    "signoff_http_request_duration_seconds",
    "Time from a request's arrival to the end of its answer, by method and route template.",
    ("method", "route"),
    buckets=LATENCY_BUCKETS,
    registry=REGISTRY,
)
DECISIONS = Counter(
    "signoff_decisions",
    "Requests that reached a final status, by outcome (approved, rejected, cancelled, expired).",
    ("outcome",),
    registry=REGISTRY,
)
CALLBACK_ATTEMPTS = Counter(
    "signoff_callback_attempts",
    "Callback attempts made by this process, by outcome (success, or the error class of "
    "the delivery log).",
    ("outcome",),
    registry=REGISTRY,
)
CALLBACK_LATENCY = Histogram(
    "signoff_callback_attempt_duration_seconds",
    "Duration of callback attempts made by this process (connect, send, answer).",
    buckets=LATENCY_BUCKETS,
    registry=REGISTRY,
)
CALLBACK_DELIVERIES_FINISHED = Counter(
    "signoff_callback_deliveries_finished",
    "Deliveries that reached a final status in this process: succeeded, or failed after "
    "their last retry.",
    ("status",),
    registry=REGISTRY,
)
POISONED_ROWS = Counter(
    "signoff_poisoned_rows",
    "Rows a background job set aside after they kept failing (poison-row isolation), by job.",
    ("job",),
    registry=REGISTRY,
)


def count_decision(outcome: str) -> None:
    DECISIONS.labels(outcome).inc()


def count_callback_attempt(outcome: str, duration_ms: int) -> None:
    CALLBACK_ATTEMPTS.labels(outcome).inc()
    CALLBACK_LATENCY.observe(duration_ms / 1000)


def count_finished_delivery(status: str) -> None:
    CALLBACK_DELIVERIES_FINISHED.labels(status).inc()


def count_poisoned_row(job: str) -> None:
    """A background job (``job``: its name, e.g. ``expiry``) parked a row it cannot process."""
    POISONED_ROWS.labels(job).inc()


def render_process_metrics() -> bytes:
    return generate_latest(REGISTRY)


def route_template(scope: Scope, routes: Sequence[BaseRoute]) -> str:
    """The template of the route that served (or would serve) this request."""
    route = scope.get("route")
    path = getattr(route, "path", None)
    if isinstance(path, str):
        return path
    # Answered before routing (a 401, a 429, a 413): find the route it was meant for.
    for candidate in routes:
        match, _ = candidate.matches(scope)
        if match is not Match.NONE:
            candidate_path = getattr(candidate, "path", None)
            if isinstance(candidate_path, str):
                return candidate_path
    return UNMATCHED_ROUTE


class RequestMetrics:
    """Counts and times every HTTP request (pure ASGI, like the rest of the middleware)."""

    def __init__(self, app: ASGIApp, routes: Sequence[BaseRoute]) -> None:
        self.app = app
        # The app's own list, read at call time: routes added later count too.
        self.routes = routes
        self._children: dict[tuple[str, str, int], tuple[Any, Any]] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def send_noting_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_noting_status)
        finally:
            self._observe(scope, status, time.perf_counter() - started)

    def _observe(self, scope: Scope, status: int, seconds: float) -> None:
        method = scope["method"] if scope["method"] in KNOWN_METHODS else "other"
        route = route_template(scope, self.routes)
        key = (method, route, status)
        children = self._children.get(key)
        if children is None:
            children = self._children[key] = (
                HTTP_REQUESTS.labels(method, route, str(status)),
                HTTP_LATENCY.labels(method, route),
            )
        counter, histogram = children
        counter.inc()
        histogram.observe(seconds)
