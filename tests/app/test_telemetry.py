"""FastAPI's own OpenTelemetry: decided once when the app is made, not on every request."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from opentelemetry import trace

from signoff.app import fastapi_telemetry
from tests.conftest import Org


async def test_a_request_asks_opentelemetry_nothing(
    client: httpx.AsyncClient, org: Org, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[str] = []
    real = trace.get_tracer_provider

    def counted() -> Any:
        asked.append("tracer")
        return real()

    monkeypatch.setattr(trace, "get_tracer_provider", counted)
    response = await client.get("/api/v1/approvals", headers=org.member.headers)
    assert response.status_code == 200, response.text
    assert asked == []


def test_telemetry_is_off_while_no_provider_is_set_up() -> None:
    assert fastapi_telemetry() == {"tracing": False, "metrics": False, "logs": False}


def test_a_provider_set_up_before_the_app_turns_its_telemetry_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(trace, "get_tracer_provider", trace.NoOpTracerProvider)
    assert fastapi_telemetry()["tracing"] is True
