"""The routing endpoints and the notification log are in the OpenAPI document."""

from __future__ import annotations

import httpx
import pytest

pytestmark = pytest.mark.anyio


async def test_routing_and_notifications_are_documented(api: httpx.AsyncClient) -> None:
    schema = (await api.get("/api/v1/openapi.json")).json()
    routing = schema["paths"]["/api/v1/routing"]
    assert {"get", "put"} <= set(routing)
    body = routing["put"]["requestBody"]["content"]["application/json"]["schema"]
    assert body == {"$ref": "#/components/schemas/RoutingDocument"}
    assert {"403"} <= set(routing["get"]["responses"])
    assert {"400", "403"} <= set(routing["put"]["responses"])
    components = schema["components"]["schemas"]
    assert {"RoutingDocument", "Rule", "ChannelSpec", "NotificationListOut"} <= set(components)
    log = schema["paths"]["/api/v1/approvals/{request_id}/notifications"]["get"]
    assert log["responses"]["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/NotificationListOut"
    }
    assert "/links/{token}" not in schema["paths"]  # pages, not API
