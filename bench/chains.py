"""The chain scenario of ``make bench``: whole approval chains, start to finish.

One chain is five calls, each answered before the next is sent, as an integration and its
approvers make them: create a sequential request, set three steps (three approvers), then
each approver votes their step in turn, the last vote approving the request. wrk cannot
carry an id from one answer into the next request, so an httpx client runs ``concurrency``
such chains side by side for a fixed time. Latencies are per call; the figure's req/s is
calls per second (five per chain).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

CALLS_PER_CHAIN = 5


@dataclass(frozen=True)
class Approver:
    user_id: str
    api_key: str


@dataclass
class ChainRun:
    chains: int = 0
    calls: int = 0
    errors: int = 0
    latencies_ms: list[float] = field(default_factory=list)
    seconds: float = 0.0

    def percentile(self, fraction: float) -> float:
        if not self.latencies_ms:
            return 0.0
        ordered = sorted(self.latencies_ms)
        return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


async def _call(
    client: httpx.AsyncClient, run: ChainRun, method: str, url: str, key: str, body: Any
) -> dict[str, Any] | None:
    started = time.perf_counter()
    response = await client.request(
        method, url, json=body, headers={"Authorization": f"Bearer {key}"}
    )
    run.latencies_ms.append((time.perf_counter() - started) * 1000)
    run.calls += 1
    if response.status_code >= 300:
        run.errors += 1
        return None
    answer: dict[str, Any] = response.json()
    return answer


async def _one_chain(
    client: httpx.AsyncClient, run: ChainRun, requester_key: str, approvers: list[Approver]
) -> None:
    body = {
        "title": "Rotate the production database credentials",
        "description": "Three people sign off, in order.",
        "priority": "high",
        "is_sequential": True,
    }
    created = await _call(client, run, "POST", "/api/v1/approvals", requester_key, body)
    if created is None:
        return
    base = f"/api/v1/approvals/{created['id']}"
    chain = {
        "steps": [{"approver_id": a.user_id, "step_order": i} for i, a in enumerate(approvers, 1)]
    }
    steps = await _call(client, run, "POST", f"{base}/steps", requester_key, chain)
    if steps is None:
        return
    for approver, step in zip(approvers, steps["data"], strict=True):
        vote = {"decision": "approve"}
        voted = await _call(
            client, run, "PATCH", f"{base}/steps/{step['id']}", approver.api_key, vote
        )
        if voted is None:
            return
    if voted.get("request_status") == "approved":
        run.chains += 1
    else:
        run.errors += 1


async def drive_chains(
    base_url: str,
    requester_key: str,
    approvers: list[Approver],
    *,
    duration: float,
    concurrency: int,
) -> ChainRun:
    run = ChainRun()
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=base_url, limits=limits, timeout=30.0) as client:
        deadline = time.monotonic() + duration
        started = time.monotonic()

        async def worker() -> None:
            while time.monotonic() < deadline:
                await _one_chain(client, run, requester_key, approvers)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        run.seconds = time.monotonic() - started
    return run
