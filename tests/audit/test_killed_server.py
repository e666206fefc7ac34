"""kill -9 of a serving process in the middle of a burst of decisions (its background
sealer running too), then a restart: every committed event is sealed, with no gap, and
the chain verifies; on both databases."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path

import httpx
import pytest
from bench.receiver import free_port
from sqlalchemy import Table, func, select

from signoff.audit import chain
from signoff.audit.sealing import seal_once
from signoff.audit.service import export_records
from signoff.context import AppContext
from signoff.models import AuditEvent
from tests.app.test_shutdown import _env, _until, signoff
from tests.audit.test_chain import chain_seqs
from tests.conftest import create_approval, create_org

pytestmark = pytest.mark.anyio

EVENTS: Table = AuditEvent.__table__  # type: ignore[assignment]


async def test_a_server_killed_mid_burst_of_decisions_leaves_a_valid_chain(
    client: httpx.AsyncClient, ctx: AppContext, database_url: str, tmp_path: Path
) -> None:
    org = await create_org(ctx, "Burst", members=3)
    voters = [org.admin, org.members[1], org.members[2]]
    requests = [
        await create_approval(client, org.member, title=f"Burst {n}", required_approvals=3)
        for n in range(20)
    ]
    port = free_port()
    log = tmp_path / "serve.log"
    env = _env(database_url, audit_seal_interval_seconds="0.1")
    async with (
        signoff(log, "serve", "--port", str(port), env=env) as server,
        httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as http,
    ):

        async def ready() -> bool:
            try:
                return (await http.get("/readyz")).status_code == 200
            except httpx.TransportError:
                return False

        await _until(ready, f"signoff serve ready:\n{log.read_text()}")

        async def vote(request_id: str, headers: dict[str, str]) -> int:
            try:
                answer = await http.patch(
                    f"/api/v1/approvals/{request_id}",
                    json={"decision": "approve"},
                    headers=headers,
                )
            except httpx.TransportError:
                return 0  # the server was killed under it
            return answer.status_code

        burst = [
            asyncio.create_task(vote(r["id"], who.headers)) for r in requests for who in voters
        ]
        # As soon as the first decision is answered: the others are under way.
        await asyncio.wait(burst, return_when=asyncio.FIRST_COMPLETED)
        server.kill()  # SIGKILL, mid-burst: no cleanup runs
        await server.wait()
        codes = await asyncio.gather(*burst)
    assert 200 in codes and 0 in codes, (codes, log.read_text()[-2000:])
    await seal_once(ctx, force_checkpoint=True)  # the restart
    org_id = uuid.UUID(org.id)
    async with ctx.db.read_session() as session:
        events = await session.scalar(select(func.count()).where(EVENTS.c.org_id == org_id))
    seqs = await chain_seqs(ctx, org_id)
    assert events == len(seqs)  # every event chained, none waiting
    assert seqs == list(range(1, len(seqs) + 1))
    lines = [json.dumps(r) async for r in export_records(ctx.db.read_session, org_id, 1)]
    result = chain.verify(chain.parse_lines(lines), None)
    assert result.ok and result.last_seq == len(seqs), result.problem
