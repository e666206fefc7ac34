"""A fleet, as separate processes: 2 ``signoff serve --no-worker`` and 2 ``signoff
worker`` on one PostgreSQL database (created for this test and dropped after) and one
Redis, with clients spread over the two replicas.

Under a bounded load it shows what running several processes relies on:

- rate limits are shared: a connection's hourly limit holds across replicas;
- a long poll held by one replica wakes, at once, on a decision made through the other
  (LISTEN/NOTIFY; the periodic re-read is set to 30 s here, so it cannot be that);
- every decided request's callback reaches a loopback receiver, and a delivery arrives
  twice only after a lease ran out (an attempt cut short by a kill);
- ``kill -9`` of one replica and one worker mid-load loses no acknowledged write, and
  every decided request still gets its callback.

PostgreSQL and Redis only (``SIGNOFF_TEST_POSTGRES_URL``, ``SIGNOFF_TEST_REDIS_URL``);
skipped, saying so, without them.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import sys
import time
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg  # type: ignore[import-untyped]
import httpx
import pytest
from bench.receiver import Receiver, free_port
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy.engine import make_url

from signoff.common.time import utcnow
from signoff.config import normalize_database_url
from signoff.migrations import upgrade_to_head
from signoff.orgs import service as orgs_service
from signoff.storage import REQUEST_CHANNEL
from signoff.wiring import Wiring
from tests.conftest import (
    POSTGRES_URL,
    REDIS_URL,
    SECRET_KEY,
    Org,
    approval_body,
    create_org,
    eventually,
    make_settings,
)
from tests.storage.listen import starts_listening

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(
        not (POSTGRES_URL and REDIS_URL),
        reason="the fleet test needs PostgreSQL and Redis: set SIGNOFF_TEST_POSTGRES_URL and "
        "SIGNOFF_TEST_REDIS_URL (CI sets both)",
    ),
]

LEASE_SECONDS = 3.0
REQUESTS = 120  # created and decided under load, half the decisions after the kill
RATE_LIMIT = 30  # the limited connection's writes per hour
CLIENTS = 8


@dataclass
class Fleet:
    replicas: list[str]  # base URLs
    processes: dict[str, asyncio.subprocess.Process]
    logs: Path
    org: Org
    limited_key: str
    receiver: Receiver
    database_url: str
    alive: list[str] = field(default_factory=list)

    def log_text(self) -> str:
        return "\n".join(
            f"--- {path.name}\n{path.read_text(errors='replace')[-3000:]}"
            for path in sorted(self.logs.glob("*.log"))
        )


@asynccontextmanager
async def throwaway_database() -> AsyncIterator[str]:
    assert POSTGRES_URL is not None
    name = f"signoff_fleet_{uuid.uuid4().hex[:10]}"
    admin = make_url(POSTGRES_URL).set(drivername="postgresql")
    admin_dsn = admin.render_as_string(hide_password=False)
    connection = await asyncpg.connect(admin_dsn)
    try:
        await connection.execute(f'CREATE DATABASE "{name}"')
    finally:
        await connection.close()
    try:
        url = admin.set(database=name).render_as_string(hide_password=False)
        yield normalize_database_url(url)
    finally:
        connection = await asyncpg.connect(admin_dsn)
        try:
            await connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await connection.close()


def fleet_env(database_url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIGNOFF_")}
    assert REDIS_URL is not None
    env.update(
        SIGNOFF_DATABASE_URL=database_url,
        SIGNOFF_SECRET_KEY=SECRET_KEY,
        SIGNOFF_REDIS_URL=REDIS_URL,
        SIGNOFF_RATE_LIMIT_CEILING="1000000",
        SIGNOFF_LONG_POLL_RECHECK_SECONDS="30",
        SIGNOFF_CALLBACK_ALLOWED_CIDRS="127.0.0.0/8",
        SIGNOFF_DELIVERY_LEASE_SECONDS=str(LEASE_SECONDS),
        SIGNOFF_DELIVERY_TIMEOUT_SECONDS="2",
        SIGNOFF_DELIVERY_RETRY_DELAYS_SECONDS="0.2,0.5,1,2",
        SIGNOFF_EXPIRY_SWEEP_INTERVAL_SECONDS="0.5",
        SIGNOFF_LOG_LEVEL="warning",
    )
    return env


async def start(logs: Path, name: str, env: dict[str, str], *args: str) -> Any:
    output = (logs / f"{name}.log").open("wb")
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "signoff.cli", *args, env=env, stdout=output, stderr=output
    )


async def until_ready(base: str, process: Any, deadline: float) -> None:
    async with httpx.AsyncClient(base_url=base, timeout=2) as http:
        while True:
            assert process.returncode is None, f"{base} exited at start"
            try:
                if (await http.get("/healthz")).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, f"{base} never answered /healthz"
            await asyncio.sleep(0.1)


async def seed_org(database_url: str) -> tuple[Org, str]:
    """The org (connections with a high limit), and a key whose connection has a low one."""
    wiring = Wiring.from_settings(
        make_settings(database_url, rate_limit_default=1_000_000, rate_limit_ceiling=1_000_000)
    )
    try:
        org = await create_org(wiring.ctx, "Fleet", members=2)
        async with wiring.ctx.transaction() as uow:
            owner = await uow.orgs.get_user(uuid.UUID(org.id), uuid.UUID(org.member.user_id))
            assert owner is not None
            limited = await orgs_service.create_connection(
                uow.orgs, wiring.ctx.box, wiring.ctx.settings, uuid.UUID(org.id), owner=owner,
                name="limited", rate_limit=RATE_LIMIT, now=utcnow(),
            )  # fmt: skip
    finally:
        await wiring.close()
    return org, limited.api_key


@asynccontextmanager
async def running_fleet(tmp_path: Path) -> AsyncIterator[Fleet]:
    async with AsyncExitStack() as stack:
        database_url = await stack.enter_async_context(throwaway_database())
        await asyncio.to_thread(upgrade_to_head, database_url)
        org, limited_key = await seed_org(database_url)
        receiver = await stack.enter_async_context(Receiver())
        env = fleet_env(database_url)
        ports = [free_port(), free_port()]
        processes: dict[str, Any] = {}
        for index, port in enumerate(ports):
            processes[f"api{index}"] = await start(
                tmp_path, f"api{index}", env, "serve", "--no-worker", "--port", str(port)
            )
        for index in range(2):
            processes[f"worker{index}"] = await start(tmp_path, f"worker{index}", env, "worker")

        async def stop_all() -> None:
            for process in processes.values():
                if process.returncode is None:
                    process.kill()
                    await process.wait()

        stack.push_async_callback(stop_all)
        replicas = [f"http://127.0.0.1:{port}" for port in ports]
        deadline = time.monotonic() + 60
        for name, base in zip(("api0", "api1"), replicas, strict=True):
            await until_ready(base, processes[name], deadline)
        fleet = Fleet(
            replicas, processes, tmp_path, org, limited_key, receiver, database_url, list(replicas)
        )
        try:
            yield fleet
        except BaseException:
            print(fleet.log_text())
            raise


class SpreadClient:
    """Calls spread round-robin over the replicas still alive; a call that finds its replica
    gone (connection refused or cut) is sent again to another. Writes carry an idempotency
    key or are safe to repeat, so a retry never makes a second request."""

    def __init__(self, fleet: Fleet, http: httpx.AsyncClient) -> None:
        self.fleet = fleet
        self.http = http
        self._turn = itertools.count()

    async def call(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        for _ in range(20):
            alive = self.fleet.alive
            base = alive[next(self._turn) % len(alive)]
            try:
                return await self.http.request(method, base + path, **kwargs)
            except httpx.TransportError:
                if base in self.fleet.alive and len(self.fleet.alive) > 1:
                    await asyncio.sleep(0.05)
                continue
        raise AssertionError(f"{method} {path}: no replica answered")


async def check_shared_rate_limit(fleet: Fleet, client: SpreadClient) -> None:
    headers = {"Authorization": f"Bearer {fleet.limited_key}"}
    statuses = []
    for index in range(RATE_LIMIT + 15):
        response = await client.call(
            "POST",
            "/api/v1/approvals",
            headers=headers,
            json=approval_body(title=f"Limited {index}", idempotency_key=f"limited-{index}"),
        )
        statuses.append(response.status_code)
    accepted = statuses.count(201)
    # Both replicas count in one Redis: the limit holds for the connection as a whole
    # (each replica alone would have let twice RATE_LIMIT through).
    assert RATE_LIMIT - 2 <= accepted <= RATE_LIMIT + 2, statuses
    assert statuses.count(429) == len(statuses) - accepted, statuses


async def check_long_poll_across_replicas(fleet: Fleet, http: httpx.AsyncClient) -> None:
    member = fleet.org.member.headers
    first, second = fleet.replicas
    created = await http.post(first + "/api/v1/approvals", headers=member, json=approval_body())
    assert created.status_code == 201, created.text
    path = f"/api/v1/approvals/{created.json()['id']}"

    async def held() -> bool:
        text = (await http.get(first + "/metrics")).text
        families = {f.name: f for f in text_string_to_metric_families(text)}
        return families["signoff_long_polls_waiting"].samples[0].value == 1

    # The replica's first long poll opens its LISTEN connection.
    async with starts_listening(fleet.database_url, REQUEST_CHANNEL):
        poll = asyncio.create_task(http.get(first + path, params={"wait": "20"}, headers=member))
        await eventually(held, "the first replica to hold the long poll")
    assert not poll.done(), "the long poll answered while the request was pending"
    decided_at = time.monotonic()
    decided = await http.patch(
        second + path, headers=fleet.org.admin.headers, json={"decision": "approve"}
    )
    assert decided.status_code == 200, decided.text
    answer = await asyncio.wait_for(poll, 15)
    woken_after = time.monotonic() - decided_at
    assert answer.json()["status"] == "approved"
    # Far below the 30 s re-read: the other replica's decision woke it.
    assert woken_after < 2.0, woken_after


@dataclass
class Load:
    created: dict[str, str] = field(default_factory=dict)  # idempotency key -> request id
    decided: set[str] = field(default_factory=set)  # decisions acknowledged (200)


async def create_all(fleet: Fleet, client: SpreadClient, load: Load) -> None:
    keys = iter(range(REQUESTS))

    async def one_client() -> None:
        for index in keys:
            key = f"load-{index}"
            response = await client.call(
                "POST",
                "/api/v1/approvals",
                headers=fleet.org.member.headers,
                json=approval_body(
                    title=f"Fleet load {index}",
                    callback_url=fleet.receiver.url,
                    idempotency_key=key,
                ),
            )
            assert response.status_code in (200, 201), response.text
            load.created[key] = response.json()["id"]

    await asyncio.gather(*(one_client() for _ in range(CLIENTS)))


async def decide_all_killing_midway(fleet: Fleet, client: SpreadClient, load: Load) -> None:
    ids = iter(sorted(load.created.values()))
    killed = asyncio.Event()

    async def kill_one_replica_and_one_worker() -> None:
        victim = fleet.replicas[0]
        fleet.alive.remove(victim)
        for name in ("api0", "worker0"):
            fleet.processes[name].send_signal(signal.SIGKILL)
            await fleet.processes[name].wait()
        killed.set()

    async def one_client() -> None:
        for request_id in ids:
            halfway = len(load.decided) >= REQUESTS // 2
            if halfway and not killed.is_set() and fleet.replicas[0] in fleet.alive:
                await kill_one_replica_and_one_worker()
            response = await client.call(
                "PATCH",
                f"/api/v1/approvals/{request_id}",
                headers=fleet.org.admin.headers,
                json={"decision": "approve"},
            )
            # 409: a decision whose answer was lost with its replica, sent again.
            assert response.status_code in (200, 409), response.text
            if response.status_code == 200:
                load.decided.add(request_id)

    await asyncio.gather(*(one_client() for _ in range(CLIENTS)))
    assert killed.is_set()


async def check_nothing_lost(fleet: Fleet, client: SpreadClient, load: Load) -> set[str]:
    """Every acknowledged create exists, every acknowledged decision holds; the ids of
    every request decided (acknowledged or not)."""
    decided: set[str] = set()
    for request_id in load.created.values():
        response = await client.call(
            "GET", f"/api/v1/approvals/{request_id}", headers=fleet.org.member.headers
        )
        assert response.status_code == 200, response.text
        status = response.json()["status"]
        if request_id in load.decided:
            assert status == "approved", (request_id, status)
        if status != "pending":
            decided.add(request_id)
    return decided


async def check_callbacks(fleet: Fleet, decided: set[str]) -> None:
    deadline = time.monotonic() + 45
    while True:
        arrived = {
            json.loads(received.body)["id"]
            for received in fleet.receiver.received
            if received.path == "/hook"
        }
        if decided <= arrived:
            break
        assert time.monotonic() < deadline, f"callbacks missing for {sorted(decided - arrived)}"
        await asyncio.sleep(0.2)
    receipts: dict[str, list[float]] = defaultdict(list)
    for received in fleet.receiver.received:
        receipts[received.headers["x-service-delivery-id"]].append(received.at)
    for delivery_id, times in receipts.items():
        times.sort()
        for earlier, later in itertools.pairwise(times):
            # A second receipt only after the first attempt's lease could run out: an
            # attempt cut short by the kill, taken over by the surviving worker.
            assert later - earlier >= LEASE_SECONDS - 0.5, (delivery_id, times)


async def test_a_fleet_shares_limits_wakes_polls_delivers_and_survives_kill_9(
    tmp_path: Path,
) -> None:
    started = time.monotonic()
    async with (
        running_fleet(tmp_path) as fleet,
        httpx.AsyncClient(timeout=30, limits=httpx.Limits(max_connections=64)) as http,
    ):
        client = SpreadClient(fleet, http)
        await check_shared_rate_limit(fleet, client)
        await check_long_poll_across_replicas(fleet, http)
        load = Load()
        await create_all(fleet, client, load)
        assert len(load.created) == REQUESTS
        await decide_all_killing_midway(fleet, client, load)
        decided = await check_nothing_lost(fleet, client, load)
        assert decided >= load.decided and len(decided) == REQUESTS
        await check_callbacks(fleet, decided)
    assert time.monotonic() - started < 110
