"""Prometheus metrics: the process's instruments, and the middleware that times requests.

Counters and histograms live in one registry for the process (``REGISTRY``), updated where
things happen: a request (``middleware.ApiGuard`` into ``HTTP_STATS``), a final transition
(``count_decision``), a callback attempt (``count_callback_attempt``), a row parked by
poison-row isolation (``count_poisoned_row``). Values read from the database (queue depth,
sweep lag) and the pool's use are computed when ``/metrics`` is scraped
(``operations/endpoints.py``), so nothing on the request path writes them.

Per request the middleware makes one count and one latency observation in plain Python
numbers (``HttpStats``), turned into Prometheus's counter and histogram when scraped. The
route label is the route's template
(``/api/v1/approvals/{request_id}``), never the raw path, so the number of series stays
bounded whatever callers send.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator, Sequence
from itertools import accumulate

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector
from starlette.routing import BaseRoute, Match
from starlette.types import Scope

REGISTRY = CollectorRegistry(auto_describe=True)
ProcessCollector(registry=REGISTRY)

# Requests answered before routing (authentication, rate limits) are matched against the
# routes afterwards; what matches no route at all is counted under this one label.
UNMATCHED_ROUTE = "unmatched"
# Any other method a caller sends is counted as "other": labels stay a bounded set.
KNOWN_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})

# Seconds. Most answers take milliseconds; long polls (``?wait=``) take up to a minute.
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0, 60.0)

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


class HttpStats(Collector):
    """Request counts and latency histograms, kept in plain integers and floats.

    Updated from the event loop's one thread only (the middleware), so no lock is taken
    per request, unlike ``prometheus_client``'s own metrics, whose every increment and
    observation takes one (a histogram's observation, three). Turned into Prometheus's
    counter and histogram families only when scraped.
    """

    def __init__(self, buckets: Sequence[float] = LATENCY_BUCKETS) -> None:
        self.buckets = tuple(buckets)
        # (method, route, status) -> requests answered
        self.counts: dict[tuple[str, str, int], int] = {}
        # (method, route) -> [count per bucket (the last one: above every bound), sum]
        self.latencies: dict[tuple[str, str], tuple[list[int], list[float]]] = {}

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        key = (method, route, status)
        self.counts[key] = self.counts.get(key, 0) + 1
        latency = self.latencies.get((method, route))
        if latency is None:
            latency = self.latencies[(method, route)] = ([0] * (len(self.buckets) + 1), [0.0])
        latency[0][bisect_left(self.buckets, seconds)] += 1
        latency[1][0] += seconds

    def observe_request(
        self, scope: Scope, routes: Sequence[BaseRoute], status: int, seconds: float
    ) -> None:
        method = scope["method"]
        self.observe(
            method if method in KNOWN_METHODS else "other",
            route_template(scope, routes),
            status,
            seconds,
        )

    def collect(self) -> Iterator[Metric]:
        requests = CounterMetricFamily(
            "signoff_http_requests",
            "HTTP requests answered, by method, route template and status.",
            labels=["method", "route", "status"],
        )
        for (method, route, status), count in list(self.counts.items()):
            requests.add_metric([method, route, str(status)], count)
        yield requests
        latency = HistogramMetricFamily(
            "signoff_http_request_duration_seconds",
            "Time from a request's arrival to the end of its answer, by method and route template.",
            labels=["method", "route"],
        )
        bounds = [*(str(float(b)) for b in self.buckets), "+Inf"]
        for (method, route), (counts, total) in list(self.latencies.items()):
            cumulative = list(accumulate(counts))
            latency.add_metric(
                [method, route], list(zip(bounds, cumulative, strict=True)), total[0]
            )
        yield latency


HTTP_STATS = HttpStats()
REGISTRY.register(HTTP_STATS)


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
