"""Delivery workers as real ``signoff worker`` processes: crash recovery and competition.

The API runs in the test process without its own worker (like ``serve --no-worker``), so
every retry here is made by a separate worker process over the same database.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from bench.receiver import Received, Receiver, Reply
from sqlalchemy import func, select

from signoff.app import create_app
from signoff.approvals import service as approvals_service
from signoff.approvals.schemas import CreateApprovalRequest
from signoff.common.ids import parse_id
from signoff.common.time import utcnow
from signoff.context import AppContext
from signoff.models import WebhookAttempt, WebhookDelivery
from signoff.webhooks.service import FirstAttempt
from signoff.wiring import Wiring
from tests.conftest import SECRET_KEY, Org, create_approval, eventually

WORKER_SETTINGS = {
    "delivery_retry_delays_seconds": [0.1, 0.2, 0.4],
    "delivery_timeout_seconds": 2.0,
    "delivery_lease_seconds": 3.5,
    "delivery_poll_interval_seconds": 0.2,
}


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    return dict(WORKER_SETTINGS)


@pytest.fixture
async def app(ctx: AppContext, wiring: Wiring) -> AsyncIterator[Any]:
    """The API without a worker of its own: only worker processes retry."""
    application = create_app(ctx.settings, wiring=wiring, background=False)
    async with application.router.lifespan_context(application):
        yield application


def _env(database_url: str, overrides: dict[str, Any]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIGNOFF_")}
    env.update(
        {
            "SIGNOFF_DATABASE_URL": database_url,
            "SIGNOFF_SECRET_KEY": SECRET_KEY,
            "SIGNOFF_EXPIRY_SWEEP_INTERVAL_SECONDS": "5",
            **{
                f"SIGNOFF_{k.upper()}": orjson.dumps(v).decode() if isinstance(v, list) else str(v)
                for k, v in {**WORKER_SETTINGS, **overrides}.items()
            },
        }
    )
    return env


@asynccontextmanager
async def worker_process(
    database_url: str, log: Path, **overrides: Any
) -> AsyncIterator[asyncio.subprocess.Process]:
    """``signoff worker`` as its own process; stopped with SIGTERM (if still alive)."""
    with log.open("wb") as output:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "signoff.cli",
            "worker",
            env=_env(database_url, overrides),
            stdout=output,
            stderr=output,
        )
        try:
            yield process
        finally:
            if process.returncode is None:
                process.send_signal(signal.SIGTERM)
                try:
                    await asyncio.wait_for(process.wait(), 15)
                except TimeoutError:
                    process.kill()
                    await process.wait()


READY = re.compile(r"delivery worker ready: nothing due, woken by signoff_deliveries")


async def until_ready(*logs: Path) -> None:
    """Wait for workers to say they are caught up and listening: work made from now on
    reaches them only by a notification (or their poll)."""

    def ready() -> bool:
        return all(log.exists() and READY.search(log.read_text()) for log in logs)

    await eventually(ready, "the workers to listen", timeout=30)


async def stored_statuses(ctx: AppContext) -> dict[str, int]:
    async with ctx.reading() as uow:
        query = select(WebhookDelivery.status, func.count()).group_by(WebhookDelivery.status)
        return {status: count for status, count in (await uow.session.execute(query)).all()}


async def test_a_worker_killed_mid_delivery_is_finished_by_another_after_its_lease(
    client: httpx.AsyncClient, ctx: AppContext, org: Org, database_url: str, tmp_path: Path
) -> None:
    def script(request: Received) -> Reply:
        number = len(receiver.received)
        if number == 1:
            return Reply(500, b"not yet")  # attempt 1, made by the API
        if number == 2:
            return Reply(hang=True)  # worker A's attempt: A dies holding it
        return Reply(200)

    async with Receiver(script=script) as receiver:
        created = await create_approval(client, org.member, callback_url=receiver.url)
        answer = await client.patch(
            f"/api/v1/approvals/{created['id']}",
            json={"decision": "approve"},
            headers=org.admin.headers,
        )
        assert answer.json()["callback_delivered"] is False

        async with worker_process(database_url, tmp_path / "a.log") as worker_a:
            await receiver.wait_for(2, timeout=20)  # A claimed the retry and is mid-POST
            async with worker_process(database_url, tmp_path / "b.log"):
                worker_a.kill()  # SIGKILL: no cleanup, the claim stays behind
                await worker_a.wait()
                requests = await receiver.wait_for(3, timeout=20)
                entries = await _wait_for_success(client, org, created["id"])
                # Recorded as succeeded: no worker will attempt the delivery again.
                assert await stored_statuses(ctx) == {"succeeded": 1}
        assert len(receiver.received) == 3  # nothing more: delivered once after the crash

    assert worker_a.returncode == -signal.SIGKILL
    # Worker B waited for A's lease to run out before taking the delivery over.
    assert requests[2].at - requests[1].at >= WORKER_SETTINGS["delivery_lease_seconds"] - 0.3
    delivery_ids = {r.headers["x-service-delivery-id"] for r in requests}
    assert len(delivery_ids) == 1
    # A's attempt never got recorded, so B's carries the same number: the one duplicate.
    assert [r.headers["x-service-attempt"] for r in requests] == ["1", "2", "2"]
    assert [(e["attempt"], e["success"]) for e in entries] == [(2, True), (1, False)]


async def _wait_for_success(
    client: httpx.AsyncClient, org: Org, request_id: str
) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        response = await client.get(
            "/api/v1/webhooks", params={"request_id": request_id}, headers=org.admin.headers
        )
        entries: list[dict[str, Any]] = response.json()["data"]
        if any(e["success"] for e in entries):
            return entries
        await asyncio.sleep(0.1)
    raise AssertionError("the delivery was never completed")


# LISTEN/NOTIFY is PostgreSQL's: this test exists only for that backend.
@pytest.mark.parametrize("test_database", ["postgres"], indirect=True)
async def test_a_notification_wakes_an_idle_postgres_worker_at_once(
    ctx: AppContext, wiring: Wiring, org: Org, database_url: str, tmp_path: Path
) -> None:
    org_id = parse_id(org.id)
    assert org_id is not None
    # Polling once a minute: only the notification can wake the worker in time.
    async with (
        Receiver() as receiver,
        worker_process(database_url, tmp_path / "w.log", delivery_poll_interval_seconds=60.0),
    ):
        await until_ready(tmp_path / "w.log")
        principal = await wiring.callers.authenticate(org.member.api_key)
        assert principal is not None
        payload = CreateApprovalRequest.model_validate(
            {"title": "t", "description": "d", "priority": "low", "callback_url": receiver.url}
        )
        started = time.monotonic()
        # Handed off as it commits, with NOTIFY.
        async with ctx.transaction(FirstAttempt.BY_WORKERS) as uow:
            await approvals_service.create_request(uow, principal, payload, ctx.box, utcnow())
            await approvals_service.cancel_pending(
                uow, org_id, None, await uow.approvals.pending_ids(org_id), utcnow()
            )
        await receiver.wait_for(1, timeout=10)
        assert time.monotonic() - started < 1.0


# Competing workers are a PostgreSQL deployment (SKIP LOCKED claims).
@pytest.mark.parametrize("test_database", ["postgres"], indirect=True)
async def test_two_workers_drain_a_thousand_deliveries_each_exactly_once(
    ctx: AppContext, wiring: Wiring, org: Org, database_url: str, tmp_path: Path
) -> None:
    total = 1000
    org_id = parse_id(org.id)
    assert org_id is not None
    async with Receiver() as receiver:
        # The spec's 10 s deadline: on a loaded machine a busy receiver may take a while,
        # and a timed-out attempt would be retried (a legitimate second receipt).
        spec = {"delivery_timeout_seconds": 10.0, "delivery_lease_seconds": 30.0}
        async with (
            worker_process(database_url, tmp_path / "a.log", **spec),
            worker_process(database_url, tmp_path / "b.log", **spec),
        ):
            await until_ready(tmp_path / "a.log", tmp_path / "b.log")
            principal = await wiring.callers.authenticate(org.member.api_key)
            assert principal is not None
            payload = CreateApprovalRequest.model_validate(
                {"title": "t", "description": "d", "priority": "low", "callback_url": receiver.url}
            )
            # All in one transaction, handed off as it commits (due now; NOTIFY wakes both
            # workers): the workers compete for it.
            async with ctx.transaction(FirstAttempt.BY_WORKERS) as uow:
                for _ in range(total):
                    await approvals_service.create_request(
                        uow, principal, payload, ctx.box, utcnow()
                    )
                cancelled = await approvals_service.cancel_pending(
                    uow, org_id, None, await uow.approvals.pending_ids(org_id), utcnow()
                )
            started = time.monotonic()
            assert len(cancelled) == total
            await receiver.wait_for(total, timeout=60)
            drained = time.monotonic() - started
            # Every attempt recorded: nothing is left for either worker to send again.
            await eventually(
                lambda: _all_succeeded(ctx, total), "every attempt to be recorded", timeout=30
            )
        logs = [(tmp_path / name).read_text() for name in ("a.log", "b.log")]

    received = Counter(r.headers["x-service-delivery-id"] for r in receiver.received)
    assert len(received) == total
    assert {r.headers["x-service-attempt"] for r in receiver.received} == {"1"}
    duplicates = [d for d, n in received.items() if n > 1]
    assert not duplicates, (f"claimed twice within a lease: {len(duplicates)}", logs)
    async with ctx.reading() as uow:
        attempts = await uow.session.scalar(select(func.count()).select_from(WebhookAttempt))
    assert attempts == total
    per_worker = [int(m.group(1)) for log in logs for m in re.finditer(r"attempts=(\d+)", log)]
    assert len(per_worker) == 2 and sum(per_worker) == total, logs
    assert min(per_worker) > 0, f"one worker did everything: {per_worker}"
    print(f"\n2 workers drained {total} deliveries in {drained:.2f} s: {per_worker}")


async def _all_succeeded(ctx: AppContext, total: int) -> bool:
    return await stored_statuses(ctx) == {"succeeded": total}
