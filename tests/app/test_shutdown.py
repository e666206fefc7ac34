"""SIGTERM stops ``signoff serve`` and ``signoff worker`` cleanly, and they exit 0.

Real processes on loopback: a held long poll is answered with the request's current state
as the server shuts down, and a worker hands back the lease of an attempt it could not
finish, so another worker takes the delivery at once instead of after the lease.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from bench.receiver import Received, Receiver, Reply, free_port
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import select

from signoff.app import create_app
from signoff.common.time import utcnow
from signoff.context import AppContext
from signoff.models import WebhookDelivery
from signoff.wiring import Wiring
from tests.conftest import SECRET_KEY, Org, create_approval

STOP_TIMEOUT = 30


def _env(database_url: str, **settings: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIGNOFF_")}
    env.update(
        SIGNOFF_DATABASE_URL=database_url,
        SIGNOFF_SECRET_KEY=SECRET_KEY,
        SIGNOFF_LOG_LEVEL="info",
        **{f"SIGNOFF_{name.upper()}": value for name, value in settings.items()},
    )
    return env


@asynccontextmanager
async def signoff(
    log: Path, *args: str, env: dict[str, str]
) -> AsyncIterator[asyncio.subprocess.Process]:
    with log.open("wb") as output:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "signoff.cli", *args, env=env, stdout=output, stderr=output
        )
        try:
            yield process
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()


async def _stopped(process: asyncio.subprocess.Process) -> int:
    process.send_signal(signal.SIGTERM)
    return await asyncio.wait_for(process.wait(), STOP_TIMEOUT)


async def _until(check: Any, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        assert time.monotonic() < deadline, f"never happened: {what}"
        await asyncio.sleep(0.05)


async def test_serve_answers_a_held_long_poll_and_exits_0_on_sigterm(
    client: httpx.AsyncClient, org: Org, database_url: str, tmp_path: Path
) -> None:
    created = await create_approval(client, org.member)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = tmp_path / "serve.log"
    env = _env(database_url)
    async with (
        signoff(log, "serve", "--port", str(port), env=env) as server,
        httpx.AsyncClient(base_url=base, timeout=90) as http,
    ):

        async def ready() -> bool:
            try:
                return (await http.get("/readyz")).status_code == 200
            except httpx.TransportError:
                return False

        async def long_poll_held() -> bool:
            text = (await http.get("/metrics")).text
            families = {f.name: f for f in text_string_to_metric_families(text)}
            return families["signoff_long_polls_waiting"].samples[0].value == 1

        await _until(ready, f"signoff serve ready:\n{log.read_text()}")
        poll = asyncio.create_task(
            http.get(
                f"/api/v1/approvals/{created['id']}",
                params={"wait": "60"},
                headers=org.member.headers,
            )
        )
        await _until(long_poll_held, "the long poll held by the server")
        signalled = time.monotonic()
        code = await _stopped(server)
        answer = await poll

    assert code == 0, log.read_text()
    assert answer.status_code == 200
    assert answer.json()["id"] == created["id"]
    assert answer.json()["status"] == "pending"  # the state as it was, not an error
    assert "steps" in answer.json()  # the full answer of a finished wait
    assert time.monotonic() - signalled < 20  # answered, not held to the end of its wait
    output = log.read_text()
    assert "Application shutdown complete" in output and "Traceback" not in output, output


async def test_serve_exits_0_on_sigterm_after_serving_mcp(
    org: Org, database_url: str, tmp_path: Path
) -> None:
    """The MCP server, started by the first /mcp request, stops with the rest."""
    port = free_port()
    log = tmp_path / "serve.log"
    async with (
        signoff(log, "serve", "--port", str(port), env=_env(database_url)) as server,
        httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as http,
    ):

        async def ready() -> bool:
            try:
                return (await http.get("/readyz")).status_code == 200
            except httpx.TransportError:
                return False

        await _until(ready, f"signoff serve ready:\n{log.read_text()}")
        initialize = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "test", "version": "1"},
            },
        }
        answer = await http.post(
            "/mcp",
            json=initialize,
            headers={**org.member.headers, "Accept": "application/json, text/event-stream"},
        )
        assert answer.status_code == 200, answer.text
        code = await _stopped(server)

    assert code == 0, log.read_text()
    output = log.read_text()
    assert "Application shutdown complete" in output and "Traceback" not in output, output


@pytest.fixture
async def app(ctx: AppContext, wiring: Wiring) -> AsyncIterator[Any]:
    """The API without a worker of its own: the worker process makes the retries."""
    application = create_app(ctx.settings, wiring=wiring, background=False)
    async with application.router.lifespan_context(application):
        yield application


async def test_worker_hands_back_an_unfinished_lease_and_exits_0_on_sigterm(
    client: httpx.AsyncClient, ctx: AppContext, org: Org, database_url: str, tmp_path: Path
) -> None:
    def script(request: Received) -> Reply:
        # Attempt 1 (the API's) fails; the worker's retry never gets an answer.
        return Reply(500) if len(receiver.received) == 1 else Reply(hang=True)

    env = _env(
        database_url,
        delivery_retry_delays_seconds="0.1",
        delivery_timeout_seconds="60",
        delivery_lease_seconds="300",
        delivery_poll_interval_seconds="0.2",
    )
    log = tmp_path / "worker.log"
    async with Receiver(script=script) as receiver:
        created = await create_approval(client, org.member, callback_url=receiver.url)
        decided = await client.patch(
            f"/api/v1/approvals/{created['id']}",
            json={"decision": "approve"},
            headers=org.admin.headers,
        )
        assert decided.json()["callback_delivered"] is False
        async with signoff(log, "worker", env=env) as worker:
            await receiver.wait_for(2, timeout=30)  # the worker's attempt hangs
            code = await _stopped(worker)
        handed_back_by = utcnow()

    assert code == 0, log.read_text()
    assert "handed back 1 unfinished deliveries" in log.read_text()
    async with ctx.reading() as uow:
        [delivery] = (
            await uow.session.scalars(
                select(WebhookDelivery).where(
                    WebhookDelivery.request_id == uuid.UUID(created["id"])
                )
            )
        ).all()
    # Free for any worker now, not held until its 300 s lease would have run out.
    assert delivery.status == "pending"
    assert delivery.claim_token is None
    assert delivery.due_at <= handed_back_by
    assert delivery.attempts == 1


async def test_worker_exits_0_on_sigterm_when_idle(database_url: str, tmp_path: Path) -> None:
    log = tmp_path / "worker.log"
    async with signoff(log, "worker", env=_env(database_url)) as worker:

        async def started() -> bool:
            return "worker started" in log.read_text()

        await _until(started, "the worker started")
        code = await _stopped(worker)
    assert code == 0, log.read_text()
