"""The hash-chained audit trail (issue 37): sealing under concurrency, and the offline
verifier catching each kind of tampering done to rows with SQL, on both databases."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from datetime import timedelta
from typing import Any, cast

import httpx
from joserfc.jwk import OKPKey
from sqlalchemy import Table, delete, func, insert, select, update

from signoff.audit import chain
from signoff.audit.sealing import seal_once, seal_org_now, verify_once
from signoff.audit.service import cloudevent, export_records
from signoff.common.time import utcnow
from signoff.context import AppContext
from signoff.models import (
    ApprovalRequest,
    AuditChainHead,
    AuditChainLink,
    AuditCheckpoint,
    AuditEvent,
)
from signoff.receipts.keys import SigningKey
from signoff.retention import service as retention
from tests.audit.support import event_rows
from tests.conftest import Org, assert_error, create_approval, create_org

EVENTS = cast(Table, AuditEvent.__table__)
CHAIN = cast(Table, AuditChainLink.__table__)
CHECKPOINTS = cast(Table, AuditCheckpoint.__table__)


async def _export(ctx: AppContext, org_id: str, since_seq: int = 1) -> list[dict[str, Any]]:
    return [r async for r in export_records(ctx.db.read_session, uuid.UUID(org_id), since_seq)]


async def _jwks(client: httpx.AsyncClient) -> dict[str, OKPKey]:
    document = (await client.get("/.well-known/jwks.json")).json()
    return {jwk["kid"]: OKPKey.import_key(jwk) for jwk in document["keys"]}


async def _verify(ctx: AppContext, client: httpx.AsyncClient, org: Org) -> chain.VerifyResult:
    records = await _export(ctx, org.id)
    lines = [json.dumps(r) for r in records]  # through JSON, as an auditor reads it
    return chain.verify(chain.parse_lines(lines), (await _jwks(client)).get)


async def requests_only(ctx: AppContext, org: Org) -> Org:
    """The org without the events of its own setup (its users and connections, tested in
    test_org_events.py), so that its chain is of its requests' events alone."""
    org_id = uuid.UUID(org.id)
    await _sql(ctx, delete(EVENTS).where(EVENTS.c.org_id == org_id, EVENTS.c.request_id.is_(None)))
    return org


async def _sealed_org(ctx: AppContext, client: httpx.AsyncClient, requests: int = 6) -> Org:
    org = await requests_only(ctx, await create_org(ctx, "Chained", members=1))
    for index in range(requests):
        await create_approval(client, org.admin, title=f"Change {index}")
    await seal_org_now(ctx, uuid.UUID(org.id), checkpoint=True)
    return org


async def _sql(ctx: AppContext, *statements: Any) -> None:
    async with ctx.db.write_transaction() as session:
        for statement in statements:
            await session.execute(statement)


def _link(org: Org, seq: int) -> Any:
    """The org's link at ``seq`` in ``audit_chain``."""
    return (CHAIN.c.org_id == uuid.UUID(org.id)) & (CHAIN.c.seq == seq)


def _at(org: Org, seq: int) -> Any:
    """The event chained at ``seq``."""
    return EVENTS.c.id.in_(select(CHAIN.c.event_id).where(_link(org, seq)))


async def chain_seqs(ctx: AppContext, org_id: uuid.UUID) -> list[int]:
    """The seqs of the org's chain, in order."""
    async with ctx.db.read_session() as session:
        statement = select(CHAIN.c.seq).where(CHAIN.c.org_id == org_id).order_by(CHAIN.c.seq)
        return list((await session.scalars(statement)).all())


async def test_a_sealed_chain_verifies_with_its_signed_checkpoint(
    client: httpx.AsyncClient, ctx: AppContext
) -> None:
    org = await _sealed_org(ctx, client)
    records = await _export(ctx, org.id)
    assert [r["seq"] for r in records if r["kind"] == "event"] == [1, 2, 3, 4, 5, 6]
    assert records[-1]["kind"] == "checkpoint" and records[-1]["seq"] == 6
    assert records[0]["prev_hash"] == chain.GENESIS_HASH
    result = await _verify(ctx, client, org)
    assert result.ok, result.problem
    assert (result.events, result.checkpoints, result.last_seq) == (6, 1, 6)
    # CloudEvents 1.0 envelopes verify the same.
    wrapped = [json.dumps(cloudevent(r, "https://signoff.test")) for r in records]
    assert json.loads(wrapped[0])["specversion"] == "1.0"
    assert chain.verify(chain.parse_lines(wrapped), (await _jwks(client)).get).ok


async def test_sealed_hashes_are_over_the_events_as_the_orm_reads_them(
    client: httpx.AsyncClient, ctx: AppContext
) -> None:
    """The sealer reads UUIDs as text made from the stored form (audit/repository.py):
    each stored hash is still the one over the event as loaded, UUID objects turned into
    text by ``str``, and the export carries those texts."""
    org = await _sealed_org(ctx, client, requests=3)
    async with ctx.db.read_session() as session:
        chained = (
            await session.execute(
                select(AuditEvent, CHAIN.c.seq, CHAIN.c.prev_hash, CHAIN.c.hash)
                .join(CHAIN, CHAIN.c.event_id == AuditEvent.id)
                .where(AuditEvent.org_id == uuid.UUID(org.id))
                .order_by(CHAIN.c.seq)
            )
        ).all()
    events = [row[0] for row in chained]
    assert len(events) == 3 and all(e.actor_id is not None for e in events)
    for event, seq, prev_hash, digest in chained:
        form = chain.canonical_event(
            seq=seq,
            id=event.id,
            org_id=event.org_id,
            request_id=event.request_id,
            type=event.type,
            actor_id=event.actor_id,
            data=event.data,
            created_at=event.created_at,
            prev_hash=prev_hash,
        )
        assert chain.event_hash(form) == digest
    exported = [r for r in await _export(ctx, org.id) if r["kind"] == "event"]
    assert [(r["id"], r["request_id"], r["actor_id"]) for r in exported] == [
        (str(e.id), str(e.request_id), str(e.actor_id)) for e in events
    ]


async def test_a_changed_event_is_named(client: httpx.AsyncClient, ctx: AppContext) -> None:
    org = await _sealed_org(ctx, client)
    await _sql(ctx, update(EVENTS).where(_at(org, 3)).values(data={"title": "Other"}))
    result = await _verify(ctx, client, org)
    assert not result.ok
    assert (result.problem, result.problem_seq) == ("event #3 was changed", 3)


async def test_a_removed_event_is_named(client: httpx.AsyncClient, ctx: AppContext) -> None:
    org = await _sealed_org(ctx, client)
    await _sql(ctx, delete(EVENTS).where(_at(org, 3)))
    result = await _verify(ctx, client, org)
    assert (result.ok, result.problem) == (False, "event #3 was removed")


async def test_reordered_events_are_named(client: httpx.AsyncClient, ctx: AppContext) -> None:
    org = await _sealed_org(ctx, client)
    await _sql(
        ctx,
        update(CHAIN).where(_link(org, 3)).values(seq=-3),
        update(CHAIN).where(_link(org, 4)).values(seq=3),
        update(CHAIN).where(_link(org, -3)).values(seq=4),
    )
    result = await _verify(ctx, client, org)
    assert (result.ok, result.problem_seq) == (False, 3)
    assert result.problem == "event #3 was reordered (swapped with the next)"


async def test_an_inserted_event_is_named(client: httpx.AsyncClient, ctx: AppContext) -> None:
    org = await _sealed_org(ctx, client)
    org_id = uuid.UUID(org.id)
    async with ctx.db.read_session() as session:
        second = (
            await session.execute(
                select(EVENTS, CHAIN.c.hash)
                .join(CHAIN, CHAIN.c.event_id == EVENTS.c.id)
                .where(_link(org, 2))
            )
        ).one()
    shifted = (CHAIN.c.org_id == org_id) & (CHAIN.c.seq >= 3)
    forged = uuid.uuid4()
    await _sql(
        ctx,
        update(CHAIN).where(shifted).values(seq=CHAIN.c.seq + 1000),
        update(CHAIN)
        .where((CHAIN.c.org_id == org_id) & (CHAIN.c.seq > 1000))
        .values(seq=CHAIN.c.seq - 999),
        insert(EVENTS).values(
            id=forged,
            org_id=org_id,
            request_id=second.request_id,
            type="request.approved",
            actor_id=None,
            data={},
            created_at=second.created_at,
        ),
        insert(CHAIN).values(
            org_id=org_id,
            seq=3,
            event_id=forged,
            prev_hash=second.hash,  # linked in, as a careful forger would
            hash="f" * 64,
        ),
    )
    result = await _verify(ctx, client, org)
    assert (result.ok, result.problem) == (False, "event #3 was inserted")


async def test_events_removed_at_the_end_are_caught_by_the_signed_checkpoint(
    client: httpx.AsyncClient, ctx: AppContext
) -> None:
    org = await _sealed_org(ctx, client)
    org_id = uuid.UUID(org.id)
    at_the_end = select(CHAIN.c.event_id).where((CHAIN.c.org_id == org_id) & (CHAIN.c.seq >= 5))
    await _sql(ctx, delete(EVENTS).where(EVENTS.c.id.in_(at_the_end)))
    result = await _verify(ctx, client, org)
    assert not result.ok
    assert result.problem == "events after #4 were removed (checkpoint #6 is signed)"


async def test_a_forged_export_line_is_caught(client: httpx.AsyncClient, ctx: AppContext) -> None:
    org = await _sealed_org(ctx, client)
    records = await _export(ctx, org.id)
    records[1]["actor_id"] = str(uuid.uuid4())
    lines = [json.dumps(r) for r in records]
    result = chain.verify(chain.parse_lines(lines), (await _jwks(client)).get)
    assert (result.ok, result.problem) == (False, "event #2 was changed")


async def test_a_checkpoint_signed_with_another_key_is_caught(
    client: httpx.AsyncClient, ctx: AppContext
) -> None:
    org = await _sealed_org(ctx, client)
    records = await _export(ctx, org.id)
    real = ctx.keys.current
    other = SigningKey(real.kid, OKPKey.generate_key("Ed25519"))  # same kid, other key
    mark = records[-1]
    payload = chain.checkpoint_payload(org.id, "head", mark["seq"], mark["hash"], utcnow())
    mark["jws"] = other.sign(payload, chain.CHECKPOINT_TYPE)
    lines = [json.dumps(r) for r in records]
    result = chain.verify(chain.parse_lines(lines), (await _jwks(client)).get)
    assert (result.ok, result.problem) == (False, "checkpoint #6 has an invalid signature")


async def test_concurrent_decisions_and_sealers_make_one_chain_without_gap_or_fork(
    client: httpx.AsyncClient, ctx: AppContext
) -> None:
    """200 concurrent decisions across 20 requests of one org, sealed meanwhile by
    three racing sealers: one chain 1..N, every event in it once."""
    crowd = await create_org(ctx, "Crowd", members=9)
    people = [crowd.admin, *crowd.members]
    requests = [
        await create_approval(client, crowd.admin, title=f"R{i}", required_approvals=10)
        for i in range(20)
    ]
    done = asyncio.Event()

    async def sealer() -> None:
        while not done.is_set():
            await seal_once(ctx)
            await asyncio.sleep(0)

    async def decisions() -> list[httpx.Response]:
        try:
            return await asyncio.gather(
                *(
                    client.patch(
                        f"/api/v1/approvals/{r['id']}",
                        headers=who.headers,
                        json={"decision": "approve"},
                    )
                    for r in requests
                    for who in people
                )
            )
        finally:
            done.set()

    responses, *_ = await asyncio.gather(decisions(), sealer(), sealer(), sealer())
    assert [r.status_code for r in responses] == [200] * 200
    await seal_once(ctx, force_checkpoint=True)
    org_id = uuid.UUID(crowd.id)
    seqs = await chain_seqs(ctx, org_id)
    async with ctx.db.read_session() as session:
        total = await session.scalar(select(func.count()).where(EVENTS.c.org_id == org_id))
    assert seqs == list(range(1, total + 1))
    assert total >= 220  # the creates, the 200 votes and the 20 approvals
    result = await _verify(ctx, client, crowd)
    assert result.ok, result.problem


async def test_two_processes_seal_one_chain(api_only: httpx.AsyncClient, ctx: AppContext) -> None:
    """Two sealer processes racing (PostgreSQL: the head row's lock; SQLite: the sealed
    mark's compare-and-set) make one chain (``api_only``: no sealer of this process's
    own)."""
    client = api_only
    org = await requests_only(ctx, await create_org(ctx, "Twins", members=1))
    for index in range(60):
        await create_approval(client, org.admin, title=f"T{index}")
    env = {
        **os.environ,
        "SIGNOFF_DATABASE_URL": ctx.settings.database_url,
        "SIGNOFF_SECRET_KEY": str(ctx.settings.secret_key),
    }
    command = [sys.executable, "-m", "signoff.cli", "audit", "seal", "--json"]
    processes = [
        await asyncio.create_subprocess_exec(*command, env=env, stdout=asyncio.subprocess.PIPE)
        for _ in range(2)
    ]
    outputs = [await p.communicate() for p in processes]
    assert [p.returncode for p in processes] == [0, 0]
    assert sum(json.loads(out)["sealed"] for out, _ in outputs) >= 60, outputs
    result = await _verify(ctx, client, org)
    assert (result.ok, result.last_seq) == (True, 60), result.problem


# ---- the export route ----


async def test_admins_export_the_chain_and_it_verifies(
    client: httpx.AsyncClient, ctx: AppContext
) -> None:
    org = await _sealed_org(ctx, client, requests=3)
    await create_approval(client, org.admin, title="Not sealed yet")
    answer = await client.get("/api/v1/audit/export", headers=org.admin.headers)
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("application/x-ndjson")
    lines = answer.text.splitlines()
    result = chain.verify(chain.parse_lines(lines), (await _jwks(client)).get)
    assert (result.ok, result.last_seq) == (True, 4), result.problem
    assert json.loads(lines[-1])["kind"] == "checkpoint"  # the head, signed for the export
    later = await client.get(
        "/api/v1/audit/export?since_seq=3&format=cloudevents", headers=org.admin.headers
    )
    events = [json.loads(line) for line in later.text.splitlines()]
    assert events[0]["specversion"] == "1.0" and events[0]["data"]["seq"] == 3
    assert chain.verify(chain.parse_lines(later.text.splitlines()), None).ok


async def test_the_export_is_for_admins_and_refuses_bad_parameters(
    client: httpx.AsyncClient, ctx: AppContext
) -> None:
    org = await create_org(ctx, "Guarded", members=1)
    refused = await client.get("/api/v1/audit/export", headers=org.member.headers)
    assert_error(refused, 403, "FORBIDDEN")
    for query in ("since_seq=0", "since_seq=x", "since_seq=99999999999999999999", "format=xml"):
        answer = await client.get(f"/api/v1/audit/export?{query}", headers=org.admin.headers)
        assert_error(answer, 400, "VALIDATION_ERROR")


# ---- retention ----


async def _purgeable_org(ctx: AppContext, client: httpx.AsyncClient) -> Org:
    """Two old cancelled requests between live ones: the purge makes holes in the chain."""
    org = await requests_only(ctx, await create_org(ctx, "Kept", members=1))
    await create_approval(client, org.admin, title="Live before")
    for index in range(2):
        old = await create_approval(client, org.admin, title=f"Old {index}")
        gone = await client.delete(f"/api/v1/approvals/{old['id']}", headers=org.admin.headers)
        assert gone.status_code == 200, gone.text
        await _sql(
            ctx,
            update(ApprovalRequest)
            .where(ApprovalRequest.id == uuid.UUID(old["id"]))
            .values(decided_at=utcnow() - timedelta(days=100)),
        )
    await create_approval(client, org.admin, title="Live after")
    await seal_org_now(ctx, uuid.UUID(org.id), checkpoint=True)
    return org


async def test_a_purge_signs_where_the_chain_now_starts_and_it_still_verifies(
    client: httpx.AsyncClient, ctx: AppContext
) -> None:
    org = await _purgeable_org(ctx, client)
    report = await retention.purge(
        ctx.transaction,
        utcnow() - timedelta(days=30),
        org_id=uuid.UUID(org.id),
        sign=retention.chain_signer(ctx),
    )
    assert report.requests == 2
    records = await _export(ctx, org.id)
    assert records[0]["kind"] == "checkpoint" and records[0]["checkpoint"] == "pruned"
    assert records[0]["seq"] == 5  # live 1; old 2-3 and 4-5 (created, cancelled)
    assert [r["seq"] for r in records if r["kind"] == "event"] == [6]
    result = await _verify(ctx, client, org)
    assert (result.ok, result.last_seq) == (True, 6), result.problem


async def test_a_purge_without_its_checkpoint_breaks_the_chain(
    client: httpx.AsyncClient, ctx: AppContext
) -> None:
    """What the pruned checkpoint prevents: the purge's holes read as removed events."""
    org = await _purgeable_org(ctx, client)
    await retention.purge(ctx.transaction, utcnow() - timedelta(days=30), org_id=uuid.UUID(org.id))
    result = await _verify(ctx, client, org)
    assert (result.ok, result.problem) == (False, "event #2 was removed")


# ---- the command line ----


def _signoff(ctx: AppContext, *args: str) -> Any:
    env = {
        **os.environ,
        "SIGNOFF_DATABASE_URL": ctx.settings.database_url,
        "SIGNOFF_SECRET_KEY": str(ctx.settings.secret_key),
    }
    command = [sys.executable, "-m", "signoff.cli", *args]
    return subprocess.run(
        command, env=env, check=False, capture_output=True, text=True, timeout=120
    )


async def test_signoff_audit_export_and_verify_with_a_jwks_file(
    client: httpx.AsyncClient, ctx: AppContext, tmp_path: Any
) -> None:
    org = await _sealed_org(ctx, client, requests=2)
    jwks = tmp_path / "jwks.json"
    jwks.write_text((await client.get("/.well-known/jwks.json")).text)
    export = tmp_path / "export.jsonl"
    made = await asyncio.to_thread(
        _signoff, ctx, "audit", "export", "--org", org.id, "--format", "cloudevents", "-o",
        str(export),
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    good = await asyncio.to_thread(
        _signoff, ctx, "audit", "verify", str(export), "--jwks", str(jwks), "--json"
    )
    assert good.returncode == 0, good.stdout + good.stderr
    assert json.loads(good.stdout)["ok"] and json.loads(good.stdout)["signatures_checked"]
    lines = export.read_text().splitlines()
    forged = json.loads(lines[0])
    forged["data"]["type"] = "request.approved"
    export.write_text("\n".join([json.dumps(forged), *lines[1:]]) + "\n")
    bad = await asyncio.to_thread(
        _signoff, ctx, "audit", "verify", str(export), "--jwks", str(jwks)
    )
    assert bad.returncode == 1
    assert "chain broken: event #1 was changed" in bad.stdout


async def test_a_sealer_killed_mid_burst_leaves_a_valid_chain(
    api_only: httpx.AsyncClient, ctx: AppContext
) -> None:
    """kill -9 of a sealing process, then a restart: no gap, no half-sealed batch."""
    org = await requests_only(ctx, await create_org(ctx, "Killed", members=1))
    request = await create_approval(api_only, org.admin, title="Busy")
    org_id, request_id = uuid.UUID(org.id), uuid.UUID(request["id"])
    now = utcnow()
    times = [now + timedelta(microseconds=index) for index in range(3000)]
    rows = event_rows(org_id, times, request_id=request_id, type="comment.created")
    async with ctx.db.write_transaction() as session:
        await session.execute(insert(EVENTS), rows)
    env = {
        **os.environ,
        "SIGNOFF_DATABASE_URL": ctx.settings.database_url,
        "SIGNOFF_SECRET_KEY": str(ctx.settings.secret_key),
    }
    sealer = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "signoff.cli", "audit", "seal", env=env
    )
    for _ in range(400):  # until its first batches commit, then kill it mid-burst
        async with ctx.db.read_session() as session:
            done = await session.scalar(select(func.count()).where(CHAIN.c.org_id == org_id))
        if done or sealer.returncode is not None:
            break
        await asyncio.sleep(0.05)
    if sealer.returncode is None:
        sealer.kill()  # SIGKILL: no cleanup runs
    await sealer.wait()
    await seal_once(ctx, force_checkpoint=True)  # the restart
    assert await chain_seqs(ctx, org_id) == list(range(1, 3002))
    result = await _verify(ctx, api_only, org)
    assert (result.ok, result.last_seq) == (True, 3001), result.problem


async def test_the_worker_verifies_apart_from_sealing_and_names_a_row_changed_since(
    client: httpx.AsyncClient, ctx: AppContext
) -> None:
    org = await requests_only(ctx, await create_org(ctx, "Rechecked", members=1))
    for index in range(4):
        await create_approval(client, org.admin, title=f"Change {index}")
    await seal_once(ctx, verify=False)
    heads = cast(Table, AuditChainHead.__table__)
    head_of_org = heads.c.org_id == uuid.UUID(org.id)

    async def head() -> Any:
        async with ctx.db.read_session() as session:
            return (await session.execute(select(heads).where(head_of_org))).one()

    assert ((await head()).seq, (await head()).verified_seq) == (4, 0)
    await _sql(ctx, update(EVENTS).where(_at(org, 3)).values(data={"title": "Other"}))
    assert await verify_once(ctx) == 2
    checked = await head()
    assert (checked.verified_seq, checked.verify_failed_seq) == (2, 3)
    assert await verify_once(ctx) == 0  # a recorded failure stays until someone looks
