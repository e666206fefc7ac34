"""The API's writes in flight (``common/api_writes.py``): background work waits for a moment
without one, never longer than it asks, and the API's guard counts every write, whatever
its answer, and no read."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from signoff.common.api_writes import SETTLE_SECONDS, ApiWrites
from signoff.context import AppContext
from signoff.wiring import Wiring
from tests.conftest import Org, create_approval
from tests.virtual_time import in_virtual_time

pytestmark = pytest.mark.anyio  # the guard's test (the others run in virtual time)


def now() -> float:
    return asyncio.get_running_loop().time()


@in_virtual_time
async def test_quiet_at_once_with_no_write_in_flight() -> None:
    writes = ApiWrites()
    began = now()
    await writes.wait_for_quiet(1.0)
    assert now() - began == pytest.approx(SETTLE_SECONDS)


@in_virtual_time
async def test_quiet_waits_for_the_write_in_flight_to_end() -> None:
    writes = ApiWrites()
    writes.started()
    waiting = asyncio.ensure_future(writes.wait_for_quiet(5.0))
    await asyncio.sleep(4.0)  # every timer due before then has fired
    assert not waiting.done()
    writes.ended()
    ended = now()
    await waiting
    assert now() - ended == pytest.approx(SETTLE_SECONDS)


@in_virtual_time
async def test_quiet_waits_no_longer_than_asked_when_writes_never_end() -> None:
    writes = ApiWrites()
    writes.started()
    began = now()
    await writes.wait_for_quiet(0.05)
    assert now() - began == pytest.approx(0.05 + SETTLE_SECONDS)
    assert writes.in_flight == 1


async def test_the_guard_counts_writes_only_while_they_run(
    client: httpx.AsyncClient, ctx: AppContext, wiring: Wiring, org: Org
) -> None:
    seen: list[int] = []
    authenticate = wiring.callers.authenticate

    async def noting(token: str) -> object:
        seen.append(wiring.api_writes.in_flight)
        return await authenticate(token)

    wiring.callers.authenticate = noting  # type: ignore[method-assign]
    stranger = {"Authorization": "Bearer not-a-key"}
    assert (await client.post("/api/v1/approvals", json={}, headers=stranger)).status_code == 401
    assert (await client.get("/api/v1/approvals", headers=stranger)).status_code == 401
    assert seen == [1, 0]  # the write counted while it ran, the read not
    await create_approval(client, org.member)
    assert wiring.api_writes.in_flight == 0
