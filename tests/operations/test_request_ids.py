"""Request ids: taken or made per request, returned as ``X-Request-Id``, written into the
log lines, and sent on the callbacks the request causes (retries included)."""

from __future__ import annotations

import io
import json
import logging
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from bench.receiver import Receiver, Reply

from signoff.config import Settings
from signoff.logs import configure_logging, request_id_scope
from tests.api.helpers import backdate_expiry
from tests.conftest import SECRET_KEY, Org, create_approval

GENERATED = re.compile(r"[0-9a-f]{32}")


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    return {"delivery_retry_delays_seconds": [0.05], "delivery_poll_interval_seconds": 0.1}


async def test_a_well_formed_incoming_id_is_returned(client: httpx.AsyncClient, org: Org) -> None:
    given = "req-2026.11.25:abc/123"
    answer = await client.get(
        "/api/v1/approvals", headers={**org.member.headers, "X-Request-Id": given}
    )
    assert answer.headers["x-request-id"] == given


@pytest.mark.parametrize("given", [None, "two words", "x" * 129, "line\nbreak", ""])
async def test_otherwise_an_id_is_made(
    client: httpx.AsyncClient, org: Org, given: str | None
) -> None:
    headers = dict(org.member.headers)
    if given is not None:
        headers["X-Request-Id"] = given.replace("\n", "%0A")  # httpx refuses raw newlines
    answers = [await client.get("/api/v1/approvals", headers=headers) for _ in range(2)]
    ids = [a.headers["x-request-id"] for a in answers]
    assert all(GENERATED.fullmatch(i) for i in ids), ids
    assert ids[0] != ids[1]


async def test_refusals_and_health_checks_carry_an_id_too(client: httpx.AsyncClient) -> None:
    for path in ("/api/v1/approvals", "/healthz", "/no/such/path"):
        answer = await client.get(path, headers={"X-Request-Id": "probe-1"})
        assert answer.headers["x-request-id"] == "probe-1", path


async def test_callbacks_and_their_retries_carry_the_deciding_request_id(
    client: httpx.AsyncClient, org: Org
) -> None:
    async with Receiver(replies=[Reply(500)], default=Reply(200)) as receiver:
        created = await create_approval(client, org.member, callback_url=receiver.url)
        decided = await client.patch(
            f"/api/v1/approvals/{created['id']}",
            json={"decision": "approve"},
            headers={**org.admin.headers, "X-Request-Id": "decide-42"},
        )
        assert decided.headers["x-request-id"] == "decide-42"
        # Attempt 1 fails; the worker's retry, made later and elsewhere, says the same.
        received = await receiver.wait_for(2, timeout=15)
    assert [r.headers["x-service-attempt"] for r in received] == ["1", "2"]
    assert [r.headers["x-request-id"] for r in received] == ["decide-42", "decide-42"]


async def test_our_request_id_replaces_one_in_callback_headers(
    client: httpx.AsyncClient, org: Org
) -> None:
    async with Receiver() as receiver:
        created = await create_approval(
            client,
            org.member,
            callback_url=receiver.url,
            callback_headers={"x-request-id": "set-at-create", "X-Team": "ops"},
        )
        await client.delete(
            f"/api/v1/approvals/{created['id']}",
            headers={**org.member.headers, "X-Request-Id": "cancel-7"},
        )
        [request] = await receiver.wait_for(1)
    assert request.headers["x-request-id"] == "cancel-7"
    assert request.headers["x-team"] == "ops"


async def test_expiry_callbacks_carry_the_sweep_batch_id(
    client: httpx.AsyncClient, ctx: Any, org: Org
) -> None:
    async with Receiver() as receiver:
        from datetime import timedelta

        from signoff.common.time import format_timestamp, utcnow

        created = await create_approval(
            client,
            org.member,
            callback_url=receiver.url,
            expires_at=format_timestamp(utcnow() + timedelta(hours=1)),
        )
        await backdate_expiry(ctx, created["id"])
        [request] = await receiver.wait_for(1, timeout=15)
    assert GENERATED.fullmatch(request.headers["x-request-id"])


@pytest.fixture
def production_log() -> Iterator[io.StringIO]:
    """What the production configuration writes to stderr, captured."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    configure_logging(Settings(env="production", secret_key=SECRET_KEY))
    output = io.StringIO()
    [handler] = root.handlers
    assert isinstance(handler, logging.StreamHandler)
    handler.setStream(output)
    try:
        yield output
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


def test_production_logs_are_json_lines_with_the_request_id(production_log: io.StringIO) -> None:
    log = logging.getLogger("signoff.test")
    with request_id_scope("abc-123"):
        log.warning("callback to %s failed", "receiver")
    log.warning("outside any request")
    lines = [json.loads(line) for line in production_log.getvalue().splitlines()]
    assert lines[0]["event"] == "callback to receiver failed"
    assert lines[0]["request_id"] == "abc-123"
    assert lines[0]["level"] == "warning" and lines[0]["logger"] == "signoff.test"
    assert "request_id" not in lines[1]
