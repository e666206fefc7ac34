"""Where callbacks may go in production: https only, and never to internal addresses.

Checked at create (400) and again at send time, against the address actually dialled;
nothing here sends a packet anywhere but loopback (10.0.0.1 is refused before dialling).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from bench.receiver import Receiver, free_port

from signoff.app import create_app
from signoff.wiring import Wiring
from tests.conftest import Org, approval_body, assert_error, create_approval, make_settings

PRODUCTION = {
    "env": "production",
    "delivery_timeout_seconds": 1.0,
    "delivery_lease_seconds": 3.0,
    "delivery_retry_delays_seconds": [30.0],  # no retry within a test
}


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    return dict(PRODUCTION)


REFUSED_URLS = [
    "http://example.com/hook",  # plain http
    "https://127.0.0.1/hook",
    "https://127.1.2.3:8443/hook",
    "https://10.0.0.1/hook",
    "https://172.16.5.4/hook",
    "https://192.168.1.1/hook",
    "https://169.254.169.254/latest/meta-data",  # cloud metadata, link-local
    "https://100.64.0.1/hook",  # carrier-grade NAT
    "https://0.0.0.0/hook",
    "https://[::1]/hook",
    "https://[::ffff:127.0.0.1]/hook",  # IPv4-mapped loopback
    "https://[::ffff:10.0.0.1]/hook",
    "https://[fe80::1]/hook",
    "https://[fc00::1]/hook",
    "https://[64:ff9b::a00:1]/hook",  # NAT64 of 10.0.0.1
    "https://localhost/hook",  # a name that resolves to loopback
]


@pytest.mark.parametrize("url", REFUSED_URLS)
async def test_production_refuses_internal_and_plain_http_urls_at_create(
    client: httpx.AsyncClient, org: Org, url: str
) -> None:
    response = await client.post(
        "/api/v1/approvals", json=approval_body(callback_url=url), headers=org.member.headers
    )
    details = assert_error(response, 400, "VALIDATION_ERROR")
    assert details["fields"][0]["field"] == "callback_url"
    test = await client.post("/api/v1/test-webhook", json={"url": url}, headers=org.member.headers)
    details = assert_error(test, 400, "VALIDATION_ERROR")
    assert details["fields"][0]["field"] == "url"


@pytest.mark.parametrize(
    "settings_overrides", [{**PRODUCTION, "callback_allowed_cidrs": ["127.0.0.0/8", "10.9.0.0/16"]}]
)
async def test_the_operator_allowlist_admits_private_networks(
    client: httpx.AsyncClient, org: Org
) -> None:
    for url in ("https://127.0.0.1:8443/hook", "https://10.9.1.2/hook", "https://localhost/x"):
        await create_approval(client, org.member, callback_url=url)
    response = await client.post(
        "/api/v1/approvals",
        json=approval_body(callback_url="https://10.8.0.1/hook"),
        headers=org.member.headers,
    )
    assert_error(response, 400, "VALIDATION_ERROR")


@asynccontextmanager
async def api(database_url: str, **overrides: Any) -> AsyncIterator[httpx.AsyncClient]:
    """Another app process over the same database, with its own settings."""
    wiring = Wiring.from_settings(make_settings(database_url, **overrides))
    application = create_app(wiring.ctx.settings, wiring=wiring, background=False)
    try:
        async with application.router.lifespan_context(application):
            transport = httpx.ASGITransport(app=application)
            async with httpx.AsyncClient(transport=transport, base_url="http://signoff.test") as c:
                yield c
    finally:
        await wiring.close()


@pytest.mark.parametrize("settings_overrides", [{}])  # created in development mode
@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"], ids=["address", "name"])
async def test_the_send_time_check_refuses_without_dialling(
    client: httpx.AsyncClient, org: Org, database_url: str, host: str
) -> None:
    """A URL accepted earlier (another mode, an allowlist since shrunk, DNS that changed)
    is checked again when sent: the receiver is never even connected to, whether the URL
    names the address or a host that resolves to it."""
    async with Receiver() as receiver:
        # https (so production's scheme rule passes) to a loopback port that listens.
        url = f"https://{host}:{receiver.port}/hook"
        created = await create_approval(client, org.member, callback_url=url)
        async with api(database_url, **PRODUCTION) as production:
            answer = await production.patch(
                f"/api/v1/approvals/{created['id']}",
                json={"decision": "approve"},
                headers=org.admin.headers,
            )
            assert answer.status_code == 200, answer.text
            assert answer.json()["callback_delivered"] is False
            log = await production.get(
                "/api/v1/webhooks", params={"request_id": created["id"]}, headers=org.admin.headers
            )
        assert receiver.connections == 0
    [entry] = log.json()["data"]
    assert entry["error"] == "address not allowed" and entry["status_code"] == 0


@pytest.mark.parametrize("settings_overrides", [{}])
async def test_the_send_time_check_dials_an_allowlisted_address(
    client: httpx.AsyncClient, org: Org, database_url: str
) -> None:
    async with Receiver() as receiver:
        created = await create_approval(
            client, org.member, callback_url=f"https://127.0.0.1:{receiver.port}/hook"
        )
        allowed = {**PRODUCTION, "callback_allowed_cidrs": ["127.0.0.1/32"]}
        async with api(database_url, **allowed) as production:
            answer = await production.patch(
                f"/api/v1/approvals/{created['id']}",
                json={"decision": "approve"},
                headers=org.admin.headers,
            )
            assert answer.status_code == 200, answer.text
            log = await production.get(
                "/api/v1/webhooks", params={"request_id": created["id"]}, headers=org.admin.headers
            )
        # Dialled: our plain-HTTP receiver hangs up on the TLS handshake.
        assert receiver.connections == 1
    [entry] = log.json()["data"]
    assert entry["success"] is False
    assert entry["error"] in ("tls error", "connection error")


@pytest.mark.parametrize("settings_overrides", [{}])
async def test_plain_http_stored_earlier_is_not_sent_in_production(
    client: httpx.AsyncClient, org: Org, database_url: str
) -> None:
    created = await create_approval(
        client, org.member, callback_url=f"http://127.0.0.1:{free_port()}/hook"
    )
    async with api(database_url, **{**PRODUCTION, "callback_allowed_cidrs": ["127.0.0.0/8"]}) as p:
        answer = await p.patch(
            f"/api/v1/approvals/{created['id']}",
            json={"decision": "approve"},
            headers=org.admin.headers,
        )
        log = await p.get(
            "/api/v1/webhooks", params={"request_id": created["id"]}, headers=org.admin.headers
        )
    assert answer.json()["callback_delivered"] is False
    assert log.json()["data"][0]["error"] == "https required"
