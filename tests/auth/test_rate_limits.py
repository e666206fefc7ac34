"""Rate limits (decisions.md section 7): headers everywhere, 429s, per connection and per
address, the writes-only scope, the operator's ceiling; in memory and in Redis.

Redis tests run when ``SIGNOFF_TEST_REDIS_URL`` is set (e.g. redis://127.0.0.1:6379/15);
each uses a key prefix of its own and deletes its keys afterwards.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from signoff.app import create_app
from signoff.context import AppContext
from signoff.ratelimit.limiter import RateLimiter
from signoff.wiring import Wiring
from tests.conftest import REDIS_URL, REQUIRE_ALL, Org, assert_error, create_approval

HOURLY = 5
UNAUTHENTICATED = 3


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    return {"rate_limit_default": HOURLY, "rate_limit_unauthenticated": UNAUTHENTICATED}


def _redis_url() -> str:
    if not REDIS_URL:
        if REQUIRE_ALL:
            pytest.fail("SIGNOFF_TEST_REQUIRE_ALL=1 but SIGNOFF_TEST_REDIS_URL is unset")
        pytest.skip("Redis rate-limit tests: set SIGNOFF_TEST_REDIS_URL=redis://host:6379/15")
    return REDIS_URL


@pytest.fixture(params=["memory", "redis"])
async def storage(
    request: pytest.FixtureRequest, ctx: AppContext, wiring: Wiring
) -> AsyncIterator[str]:
    """Run a test with the in-memory counters, then with Redis ones."""
    if request.param == "memory":
        yield "memory"
        return
    wiring.limiter = RateLimiter(_redis_url(), key_prefix=f"signoff-test-{uuid.uuid4().hex}")
    try:
        yield "redis"
    finally:
        await wiring.limiter.reset()


def _limit_headers(response: httpx.Response) -> tuple[int, int, int]:
    return (
        int(response.headers["x-ratelimit-limit"]),
        int(response.headers["x-ratelimit-remaining"]),
        int(response.headers["x-ratelimit-reset"]),
    )


async def test_every_api_response_carries_the_headers(
    client: httpx.AsyncClient, org: Org, storage: str
) -> None:
    created = await create_approval(client, org.member)
    url = f"/api/v1/approvals/{created['id']}"
    headers = org.member.headers
    responses = [
        await client.get(url, headers=headers),  # 200
        await client.post("/api/v1/approvals", headers=headers, json={}),  # 400
        await client.get("/api/v1/nothing/here", headers=headers),  # 404, unknown path
        await client.put("/api/v1/approvals", headers=headers, json={}),  # 405
    ]
    assert [r.status_code for r in responses] == [200, 400, 404, 405]
    now = time.time()
    # The create was the first call of the window; each call takes one more.
    assert [_limit_headers(r)[:2] for r in responses] == [
        (HOURLY, HOURLY - n) for n in (2, 3, 4, 5)
    ]
    for response in responses:
        reset = _limit_headers(response)[2]
        assert now < reset <= now + 3600 + 1
        assert "retry-after" not in response.headers


async def test_public_api_paths_carry_the_headers_without_counting(
    client: httpx.AsyncClient, org: Org, storage: str
) -> None:
    for _ in range(UNAUTHENTICATED + 2):
        response = await client.get("/api/v1/openapi.json")
        assert response.status_code == 200
        assert _limit_headers(response)[:2] == (UNAUTHENTICATED, UNAUTHENTICATED)
    # Reading the docs did not use up the address's allowance.
    _, remaining, _ = _limit_headers(await client.get("/api/v1/me"))
    assert remaining == UNAUTHENTICATED - 1


async def test_429_when_a_connection_reaches_its_limit(
    client: httpx.AsyncClient, org: Org, storage: str
) -> None:
    for n in range(HOURLY):
        response = await client.get("/api/v1/approvals", headers=org.member.headers)
        assert response.status_code == 200
        assert _limit_headers(response)[1] == HOURLY - 1 - n
    limited = await client.post(
        "/api/v1/approvals",
        headers=org.member.headers,
        json={"title": "t", "description": "d", "priority": "low"},
    )
    assert_error(limited, 429, "RATE_LIMITED")
    limit, remaining, reset = _limit_headers(limited)
    assert (limit, remaining) == (HOURLY, 0)
    retry_after = int(limited.headers["retry-after"])
    assert 1 <= retry_after <= 3600
    assert abs((time.time() + retry_after) - reset) <= 2
    # A refused call does nothing: the create above did not happen.
    listing = await client.get("/api/v1/approvals", headers=org.admin.headers)
    assert listing.json()["total"] == 0
    # Still limited on every path, known or not.
    assert (await client.get("/api/v1/x", headers=org.member.headers)).status_code == 429


async def test_limits_are_per_connection(
    client: httpx.AsyncClient, org: Org, other_org: Org, storage: str
) -> None:
    for _ in range(HOURLY):
        await client.get("/api/v1/me", headers=org.members[0].headers)
    assert (await client.get("/api/v1/me", headers=org.members[0].headers)).status_code == 429
    for who in (org.members[1], org.admin, other_org.member):
        response = await client.get("/api/v1/me", headers=who.headers)
        assert response.status_code == 200
        assert _limit_headers(response)[:2] == (HOURLY, HOURLY - 1)


async def test_unauthenticated_calls_are_counted_per_address(
    app: Any, client: httpx.AsyncClient, org: Org, storage: str
) -> None:
    bad_key = {"Authorization": "Bearer gk_" + "0" * 64}
    for n in range(UNAUTHENTICATED):
        response = await client.get("/api/v1/approvals", headers=bad_key)
        assert_error(response, 401, "UNAUTHORIZED")
        assert _limit_headers(response)[:2] == (UNAUTHENTICATED, UNAUTHENTICATED - 1 - n)
    guessed = await client.get("/api/v1/approvals", headers=bad_key)
    assert_error(guessed, 429, "RATE_LIMITED")
    assert int(guessed.headers["retry-after"]) >= 1
    # Missing credentials count the same way.
    assert (await client.get("/api/v1/approvals")).status_code == 429
    # A real key from the same address is counted against its connection, not the address.
    assert (await client.get("/api/v1/me", headers=org.member.headers)).status_code == 200
    # Another address has its own allowance.
    transport = httpx.ASGITransport(app=app, client=("198.51.100.9", 40000))
    async with httpx.AsyncClient(transport=transport, base_url="http://signoff.test") as other:
        response = await other.get("/api/v1/approvals", headers=bad_key)
        assert_error(response, 401, "UNAUTHORIZED")
        assert _limit_headers(response)[1] == UNAUTHENTICATED - 1


async def test_writes_scope_counts_only_writes_and_guards_reads_per_minute(
    client: httpx.AsyncClient, org: Org, ctx: AppContext, storage: str
) -> None:
    ctx.settings = ctx.settings.model_copy(
        update={"rate_limit_scope": "writes", "rate_limit_reads_per_minute": 4}
    )
    # Polling: reads do not touch the hourly quota...
    for n in range(4):
        response = await client.get("/api/v1/approvals", headers=org.member.headers)
        assert response.status_code == 200
        limit, remaining, reset = _limit_headers(response)
        assert (limit, remaining) == (4, 3 - n)
        assert reset <= time.time() + 60 + 1
    # ...but a per-minute guard holds them.
    held = await client.get("/api/v1/approvals", headers=org.member.headers)
    assert_error(held, 429, "RATE_LIMITED")
    assert 1 <= int(held.headers["retry-after"]) <= 60
    # Writes still have the whole hourly quota.
    for n in range(HOURLY):
        response = await client.post(
            "/api/v1/approvals",
            headers=org.member.headers,
            json={"title": f"t{n}", "description": "d", "priority": "low"},
        )
        assert response.status_code == 201
        assert _limit_headers(response)[:2] == (HOURLY, HOURLY - 1 - n)
    response = await client.post(
        "/api/v1/approvals",
        headers=org.member.headers,
        json={"title": "one too many", "description": "d", "priority": "low"},
    )
    assert_error(response, 429, "RATE_LIMITED")
    me = (await client.get("/api/v1/me", headers=org.admin.headers)).json()
    assert me["rate_limit"]["scope"] == "writes"


async def test_the_ceiling_caps_a_connections_limit(
    client: httpx.AsyncClient, org: Org, ctx: AppContext, storage: str
) -> None:
    # The operator lowers the ceiling below what connections were given.
    ctx.settings = ctx.settings.model_copy(update={"rate_limit_ceiling": 2})
    first = await client.get("/api/v1/me", headers=org.member.headers)
    assert first.json()["rate_limit"]["limit"] == 2
    assert _limit_headers(first)[:2] == (2, 1)
    assert (await client.get("/api/v1/me", headers=org.member.headers)).status_code == 200
    assert_error(await client.get("/api/v1/me", headers=org.member.headers), 429, "RATE_LIMITED")


async def test_calls_already_made_count_against_a_lowered_limit(
    client: httpx.AsyncClient, org: Org, ctx: AppContext, storage: str
) -> None:
    """Lowering a limit mid-window does not hand out a fresh allowance."""
    for _ in range(3):
        assert (await client.get("/api/v1/me", headers=org.member.headers)).status_code == 200
    ctx.settings = ctx.settings.model_copy(update={"rate_limit_ceiling": 3})
    limited = await client.get("/api/v1/me", headers=org.member.headers)
    assert_error(limited, 429, "RATE_LIMITED")
    assert _limit_headers(limited)[:2] == (3, 0)
    # Raising it again gives back what is left of the higher limit, not a new window.
    ctx.settings = ctx.settings.model_copy(update={"rate_limit_ceiling": 100_000})
    response = await client.get("/api/v1/me", headers=org.member.headers)
    assert response.status_code == 200
    # Five calls so far (the refused one counts too), one more now.
    assert _limit_headers(response)[:2] == (HOURLY, 0)
    assert_error(await client.get("/api/v1/me", headers=org.member.headers), 429, "RATE_LIMITED")


async def test_redis_counters_are_shared_by_replicas(
    client: httpx.AsyncClient, org: Org, ctx: AppContext, wiring: Wiring
) -> None:
    prefix = f"signoff-test-{uuid.uuid4().hex}"
    wiring.limiter = RateLimiter(_redis_url(), key_prefix=prefix)
    replica_ctx = Wiring.from_settings(ctx.settings)
    replica_ctx.limiter = RateLimiter(_redis_url(), key_prefix=prefix)
    replica = create_app(ctx.settings, wiring=replica_ctx, background=False)
    transport = httpx.ASGITransport(app=replica, client=("203.0.113.7", 50001))
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://b.test") as other:
            for n in range(HOURLY):
                target = client if n % 2 == 0 else other
                response = await target.get("/api/v1/me", headers=org.member.headers)
                assert _limit_headers(response)[1] == HOURLY - 1 - n
            for target in (client, other):
                limited = await target.get("/api/v1/me", headers=org.member.headers)
                assert_error(limited, 429, "RATE_LIMITED")
    finally:
        await wiring.limiter.reset()
        await replica_ctx.close()


async def test_an_unreachable_redis_lets_calls_through(
    client: httpx.AsyncClient, org: Org, ctx: AppContext, wiring: Wiring
) -> None:
    """An approval gateway that stops approving because a cache is down does more harm."""
    wiring.limiter = RateLimiter("redis://127.0.0.1:1/0")
    for _ in range(HOURLY + 2):
        response = await client.get("/api/v1/me", headers=org.member.headers)
        assert response.status_code == 200
        assert _limit_headers(response)[0] == HOURLY
