"""The request counts and latency histograms behind ``/metrics`` (signoff/metrics.py)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from signoff.metrics import HttpStats


def _samples(stats: HttpStats) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    registry = CollectorRegistry()
    registry.register(stats)
    text = generate_latest(registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_counts_by_status_and_cumulative_buckets_with_le_bounds() -> None:
    stats = HttpStats(buckets=(0.01, 0.1, 1.0))
    for status, seconds in ((200, 0.01), (200, 0.05), (404, 0.5), (200, 30.0)):
        stats.observe("GET", "/api/v1/approvals/{request_id}", status, seconds)
    samples = _samples(stats)
    route = ("route", "/api/v1/approvals/{request_id}")
    method = ("method", "GET")
    assert samples[("signoff_http_requests_total", (method, route, ("status", "200")))] == 3
    assert samples[("signoff_http_requests_total", (method, route, ("status", "404")))] == 1
    name = "signoff_http_request_duration_seconds"
    buckets = {
        le: samples[(f"{name}_bucket", (("le", le), method, route))]
        for le in ("0.01", "0.1", "1.0", "+Inf")
    }
    # A value on a bound counts in that bound's bucket (le: less than or equal).
    assert buckets == {"0.01": 1, "0.1": 2, "1.0": 3, "+Inf": 4}
    assert samples[(f"{name}_count", (method, route))] == 4
    assert abs(samples[(f"{name}_sum", (method, route))] - 30.56) < 1e-9
