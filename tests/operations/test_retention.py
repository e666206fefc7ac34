"""Retention: ``signoff purge`` and the service behind it, on a seeded database.

Old finished requests go with everything recorded about them; pending requests, recent
ones, ones whose callback is still being retried, and other orgs' (with ``--org``) stay.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import httpx
import pytest
from bench.receiver import Receiver, Reply
from sqlalchemy import func, select, text, update

from signoff.audit import repository
from signoff.audit.sealing import seal_org_now
from signoff.common.time import utcnow
from signoff.context import AppContext
from signoff.models import (
    ApprovalRequest,
    ApprovalStep,
    AuditEvent,
    Comment,
    Vote,
    WebhookAttempt,
    WebhookDelivery,
)
from signoff.retention import service
from tests.conftest import SECRET_KEY, Org, create_approval, create_org
from tests.helpers import NO_SWEEP, backdate_expiry
from tests.steps.test_steps import set_chain, vote

CHILDREN = (Vote, ApprovalStep, Comment, AuditEvent, WebhookDelivery, WebhookAttempt)


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    # A failed callback waits an hour for its retry: its delivery stays pending.
    return {**NO_SWEEP, "delivery_retry_delays_seconds": [3600.0]}


@dataclass
class Seeded:
    old: list[str]  # finished long ago: purged
    kept: list[str]  # everything else in the org
    other_org_old: str  # finished long ago, in another org


async def _decide(client: httpx.AsyncClient, org: Org, request_id: str, decision: str) -> None:
    answer = await client.patch(
        f"/api/v1/approvals/{request_id}",
        json={"decision": decision, "comment": f"{decision}d after review"},
        headers=org.admin.headers,
    )
    assert answer.status_code == 200, answer.text


async def _age(ctx: AppContext, request_id: str, days: int) -> None:
    """Move a request's decision back in time."""
    async with ctx.transaction() as uow:
        await uow.session.execute(
            update(ApprovalRequest)
            .where(ApprovalRequest.id == uuid.UUID(request_id))
            .values(decided_at=utcnow() - timedelta(days=days))
        )


async def _seed(client: httpx.AsyncClient, ctx: AppContext, org: Org) -> Seeded:
    other = await create_org(ctx, "Globex", members=1)
    old: list[str] = []
    kept: list[str] = []
    async with Receiver(default=Reply(200)) as ok, Receiver(default=Reply(500)) as failing:
        for decision in ("approve", "reject", "approve"):
            request = await create_approval(
                client, org.member, title=f"Purgeable zanzibar {decision}", callback_url=ok.url
            )
            await _decide(client, org, request["id"], decision)
            old.append(request["id"])
        chained = await create_approval(client, org.admin, title="Chained zanzibar")
        [step] = await set_chain(client, org.admin, chained["id"], [org.member])
        assert (await vote(client, org.member, chained["id"], step["id"])).status_code == 200
        old.append(chained["id"])
        cancelled = await create_approval(client, org.member, title="Cancelled zanzibar")
        gone = await client.delete(
            f"/api/v1/approvals/{cancelled['id']}", headers=org.member.headers
        )
        assert gone.status_code == 200, gone.text
        old.append(cancelled["id"])

        retrying = await create_approval(
            client, org.member, title="Retrying zanzibar", callback_url=failing.url
        )
        await _decide(client, org, retrying["id"], "approve")
        kept.append(retrying["id"])
    recent = await create_approval(client, org.member, title="Recent zanzibar")
    await _decide(client, org, recent["id"], "approve")
    kept.append(recent["id"])
    pending = await create_approval(client, org.member, title="Pending zanzibar")
    kept.append(pending["id"])
    overdue = await create_approval(
        client, org.member, title="Overdue zanzibar",
        expires_at=(utcnow() + timedelta(hours=1)).isoformat(),
    )  # fmt: skip
    # Past its deadline, not yet swept: still pending in the database, so it stays.
    await backdate_expiry(ctx, overdue["id"], ago=timedelta(days=400))
    kept.append(overdue["id"])
    elsewhere = await create_approval(client, other.member, title="Globex zanzibar")
    await client.delete(f"/api/v1/approvals/{elsewhere['id']}", headers=other.member.headers)

    for request_id in [*old, retrying["id"], elsewhere["id"]]:
        await _age(ctx, request_id, days=100)
    return Seeded(old, kept, elsewhere["id"])


async def _rows(ctx: AppContext, request_ids: list[str]) -> dict[str, int]:
    ids = [uuid.UUID(r) for r in request_ids]
    counts = {}
    async with ctx.reading() as uow:
        for model in (ApprovalRequest, *CHILDREN):
            column = model.id if model is ApprovalRequest else model.request_id  # type: ignore[attr-defined]
            counts[model.__name__] = int(
                await uow.session.scalar(select(func.count()).where(column.in_(ids))) or 0
            )
    return counts


async def _search(client: httpx.AsyncClient, org: Org, word: str) -> set[str]:
    found = await client.get(
        "/api/v1/approvals", params={"search": word, "page_size": 100}, headers=org.admin.headers
    )
    assert found.status_code == 200, found.text
    return {item["id"] for item in found.json()["data"]}


async def test_purge_deletes_old_finished_requests_with_everything_about_them(
    client: httpx.AsyncClient, ctx: AppContext, org: Org, backend: str
) -> None:
    seeded = await _seed(client, ctx, org)
    before_purge = await _rows(ctx, seeded.old)
    assert before_purge["ApprovalRequest"] == 5
    assert all(before_purge[m.__name__] > 0 for m in CHILDREN), before_purge
    kept_rows = await _rows(ctx, seeded.kept)
    assert await _search(client, org, "zanzibar") == {*seeded.old, *seeded.kept}
    org_id = uuid.UUID(org.id)

    cutoff = utcnow() - timedelta(days=30)
    counted = await service.purge(ctx.transaction, cutoff, org_id=org_id, dry_run=True)
    assert counted.requests == 5 and not counted.rows
    assert (await _rows(ctx, seeded.old)) == before_purge  # a dry run deletes nothing

    report = await service.purge(ctx.transaction, cutoff, org_id=org_id, batch_size=2)
    assert report.requests == 5
    assert report.batches == 3  # 2 + 2 + 1: each its own transaction
    assert report.rows["events"] == before_purge["AuditEvent"]
    assert report.rows["delivery_attempts"] == before_purge["WebhookAttempt"]

    assert set((await _rows(ctx, seeded.old)).values()) == {0}
    assert await _rows(ctx, seeded.kept) == kept_rows  # untouched
    assert await _rows(ctx, [seeded.other_org_old]) != {"ApprovalRequest": 0}
    # Search no longer finds what was purged (on SQLite: the FTS5 index too).
    assert await _search(client, org, "zanzibar") == set(seeded.kept)
    if backend == "sqlite":
        async with ctx.reading() as uow:
            indexed = await uow.session.scalar(
                text(
                    "SELECT count(*) FROM approval_requests_fts "
                    "WHERE approval_requests_fts MATCH 'zanzibar'"
                )
            )
        assert indexed == len(seeded.kept) + 1  # the other org's request is still indexed
    # Gone for the API as well.
    for request_id in seeded.old:
        missing = await client.get(f"/api/v1/approvals/{request_id}", headers=org.admin.headers)
        assert missing.status_code == 404

    # Without --org, every org's old requests go; a second run finds nothing more.
    everywhere = await service.purge(ctx.transaction, cutoff)
    assert everywhere.requests == 1
    assert (await _rows(ctx, [seeded.other_org_old]))["ApprovalRequest"] == 0
    assert (await service.purge(ctx.transaction, cutoff)).requests == 0


async def _until_a_statement_waits_on_a_lock(ctx: AppContext) -> None:
    """Returns once a session of the test's database waits on a row or transaction lock
    (PostgreSQL's ``pg_stat_activity``)."""
    waiting = text(
        "SELECT count(*) FROM pg_stat_activity "
        "WHERE datname = current_database() AND wait_event_type = 'Lock'"
    )
    for _ in range(2000):
        async with ctx.db.read_session() as session:
            if await session.scalar(waiting):
                return
        await asyncio.sleep(0.01)
    raise AssertionError("no statement waited on a lock")


@pytest.mark.usefixtures("postgres_only")
@pytest.mark.parametrize("signed", [False, True], ids=["unsigned", "signed"])
async def test_a_purge_and_a_sealer_of_its_org_do_not_deadlock(
    api_only: httpx.AsyncClient, ctx: AppContext, monkeypatch: pytest.MonkeyPatch, signed: bool
) -> None:
    """The interleaving that deadlocked, driven by hand: a sealer has taken an old
    request's events off the waiting list, and not linked them yet, when a purge of the
    request starts. The purge waits for the org's chain head until the sealer is done;
    were it to delete the events first, its delete would wait on the sealer's
    waiting-list rows while the sealer's links wait on the deleted events."""
    org = await create_org(ctx, "Initech", members=1)
    old = await create_approval(api_only, org.admin, title="Old")
    gone = await api_only.delete(f"/api/v1/approvals/{old['id']}", headers=org.admin.headers)
    assert gone.status_code == 200, gone.text
    await _age(ctx, old["id"], days=100)
    taken, linking = asyncio.Event(), asyncio.Event()
    append_links = repository.append_links

    async def links_held_back(*args: Any) -> None:
        taken.set()
        await linking.wait()
        await append_links(*args)

    monkeypatch.setattr(repository, "append_links", links_held_back)
    org_id = uuid.UUID(org.id)
    sealer = asyncio.create_task(seal_org_now(ctx, org_id, checkpoint=False))
    await taken.wait()
    sign = service.chain_signer(ctx) if signed else None
    cutoff = utcnow() - timedelta(days=30)
    purge = asyncio.create_task(service.purge(ctx.transaction, cutoff, org_id=org_id, sign=sign))
    await _until_a_statement_waits_on_a_lock(ctx)  # the purge, on what the sealer holds
    linking.set()
    sealed, report = await asyncio.gather(sealer, purge)
    assert sealed > 0
    assert (report.requests, report.rows["events"]) == (1, 2)  # created, cancelled
    assert (await _rows(ctx, [old["id"]]))["AuditEvent"] == 0


async def test_signoff_purge_command(
    client: httpx.AsyncClient, ctx: AppContext, org: Org, database_url: str
) -> None:
    seeded = await _seed(client, ctx, org)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIGNOFF_")}
    env.update(SIGNOFF_DATABASE_URL=database_url, SIGNOFF_SECRET_KEY=SECRET_KEY)
    cutoff = (utcnow() - timedelta(days=30)).date().isoformat()

    def signoff_purge(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "signoff.cli", "purge", *args],
            env=env, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip

    async def purge(*args: str) -> dict[str, Any]:
        result = await asyncio.to_thread(signoff_purge, "--before", cutoff, *args, "--json")
        assert result.returncode == 0, result.stderr
        data: dict[str, Any] = json.loads(result.stdout)
        return data

    dry = await purge("--org", org.name, "--dry-run")
    assert (dry["requests"], dry["dry_run"], dry["rows"]) == (5, True, {})
    done = await purge("--org", org.id, "--batch-size", "3")
    assert (done["requests"], done["batches"]) == (5, 2)
    assert set((await _rows(ctx, seeded.old)).values()) == {0}
    assert (await _rows(ctx, seeded.kept))["ApprovalRequest"] == len(seeded.kept)
    assert (await purge())["requests"] == 1  # the other org's

    refused = await asyncio.to_thread(signoff_purge, "--before", "last tuesday")
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
