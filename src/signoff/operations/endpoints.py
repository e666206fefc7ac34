"""``GET /metrics``: Prometheus's text format (docs/operations.md).

Outside ``/api/v1``: no API key, no rate limit. With ``SIGNOFF_METRICS_TOKEN`` set, the
scraper must send ``Authorization: Bearer <token>``; without it, keep the path off the
public internet (the load balancer should not route it).
"""

from __future__ import annotations

import hmac
from collections.abc import Iterator

from fastapi import APIRouter
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.requests import Request
from starlette.responses import Response

from signoff.context import context_of
from signoff.errors import Unauthorized
from signoff.metrics import render_process_metrics
from signoff.operations.service import ScrapeSnapshot, read_snapshot
from signoff.wiring import wiring_of

router = APIRouter(tags=["operations"])


class _SnapshotCollector(Collector):
    def __init__(self, snapshot: ScrapeSnapshot) -> None:
        self.snapshot = snapshot

    def collect(self) -> Iterator[Metric]:
        s = self.snapshot
        yield GaugeMetricFamily(
            "signoff_callback_deliveries_pending",
            "Callback deliveries not finished yet (due, scheduled for a retry, or held).",
            value=s.deliveries_pending,
        )
        yield GaugeMetricFamily(
            "signoff_callback_deliveries_due",
            "Pending callback deliveries whose time has come: the workers' backlog.",
            value=s.deliveries_due,
        )
        yield GaugeMetricFamily(
            "signoff_expiry_sweep_lag_seconds",
            "Now minus the deadline of the pending request longest past it (0 when none).",
            value=s.expiry_lag_seconds,
        )
        yield GaugeMetricFamily(
            "signoff_long_polls_waiting",
            "Requests with a long poll (?wait=) held by this process.",
            value=s.long_polls_waiting,
        )
        size = GaugeMetricFamily(
            "signoff_db_pool_size", "Connections the database pool keeps.", labels=["engine"]
        )
        used = GaugeMetricFamily(
            "signoff_db_pool_checked_out",
            "Database connections in use now.",
            labels=["engine"],
        )
        overflow = GaugeMetricFamily(
            "signoff_db_pool_overflow",
            "Connections open beyond the pool's size now.",
            labels=["engine"],
        )
        for pool in s.pools:
            size.add_metric([pool.engine], pool.size)
            used.add_metric([pool.engine], pool.checked_out)
            overflow.add_metric([pool.engine], pool.overflow)
        yield from (size, used, overflow)


def _authorized(request: Request, token: str | None) -> bool:
    if token is None:
        return True
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip(), token)


@router.get(
    "/metrics",
    summary="Prometheus metrics",
    response_class=Response,
    responses={200: {"content": {CONTENT_TYPE_LATEST: {}}}},
)
async def metrics(request: Request) -> Response:
    ctx = context_of(request)
    if not _authorized(request, ctx.settings.metrics_token):
        raise Unauthorized("Send the metrics token: Authorization: Bearer <token>.")
    scrape = CollectorRegistry(auto_describe=False)
    waiting = wiring_of(request).waiters.waiting()
    scrape.register(_SnapshotCollector(await read_snapshot(ctx, waiting)))
    body = render_process_metrics() + generate_latest(scrape)
    return Response(body, media_type=CONTENT_TYPE_LATEST)
