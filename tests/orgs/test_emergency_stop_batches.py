"""The hard stop (``emergency-stop on --cancel-pending``) cancels in bounded batches.

Each batch is its own transaction (other writers go on in between), commits its
cancellations with their callbacks, and a stop cut short part-way is finished by running
it again (``approvals.service.cancel_all_pending``).
"""

from __future__ import annotations

import functools
import json
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import anyio
import httpx
import orjson
import pytest
from bench.receiver import Receiver, free_port
from sqlalchemy import func, select
from typer.testing import CliRunner

from signoff.approvals import service as approvals_service
from signoff.approvals.schemas import CreateApprovalRequest
from signoff.approvals.service import TransitionResult
from signoff.cli import app as cli_app
from signoff.common.ids import parse_id
from signoff.common.time import utcnow
from signoff.config import get_settings
from signoff.context import AppContext
from signoff.models import ApprovalRequest, Organization, WebhookDelivery
from signoff.unit_of_work import UnitOfWork
from signoff.webhooks.service import FirstAttempt
from signoff.wiring import Wiring
from tests.conftest import SECRET_KEY, Org, create_approval


class Crash(Exception):
    pass


async def _create(
    ctx: AppContext, wiring: Wiring, org: Org, count: int, *, callback: bool = True
) -> list[uuid.UUID]:
    principal = await wiring.callers.authenticate(org.member.api_key)
    assert principal is not None
    body: dict[str, Any] = {"title": "t", "description": "d", "priority": "low"}
    if callback:
        # Never dialled: these tests hand the callbacks to workers, none of which runs.
        body["callback_url"] = f"http://127.0.0.1:{free_port()}/hook"
    ids = []
    async with ctx.transaction() as uow:
        for _ in range(count):
            created = await approvals_service.create_request(
                uow,
                principal,
                CreateApprovalRequest.model_validate(body),
                ctx.box,
                utcnow(),
            )
            ids.append(created.request.id)
    return ids


async def _stop(ctx: AppContext, org_id: uuid.UUID) -> None:
    async with ctx.transaction() as uow:
        await uow.orgs.set_emergency_stop(org_id, True)


async def _statuses(ctx: AppContext, org_id: uuid.UUID) -> Counter[str]:
    async with ctx.reading() as uow:
        rows = await uow.session.execute(
            select(ApprovalRequest.status, func.count())
            .where(ApprovalRequest.org_id == org_id)
            .group_by(ApprovalRequest.status)
        )
        return Counter(dict(rows.all()))


async def _deliveries_per_request(ctx: AppContext, org_id: uuid.UUID) -> Counter[uuid.UUID]:
    async with ctx.reading() as uow:
        rows = await uow.session.scalars(
            select(WebhookDelivery.request_id).where(WebhookDelivery.org_id == org_id)
        )
        return Counter(rows.all())


class Batches:
    """The ``committed`` hook: notes each batch, and the callbacks its transaction wrote."""

    def __init__(self) -> None:
        self.sizes: list[int] = []
        self.callbacks: list[int] = []
        self.ids: list[set[uuid.UUID]] = []

    async def committed(self, uow: UnitOfWork, results: list[TransitionResult]) -> None:
        self.sizes.append(len(results))
        self.callbacks.append(uow.first_attempts.handed_off)
        self.ids.append({r.request.id for r in results})


def _to_workers(ctx: AppContext) -> Any:
    """The batches' transactions, handing their callbacks to the (absent) workers."""
    return functools.partial(ctx.transaction, FirstAttempt.BY_WORKERS)


def _org_id(org: Org) -> uuid.UUID:
    org_id = parse_id(org.id)
    assert org_id is not None
    return org_id


async def test_every_pending_request_is_cancelled_batch_by_batch_with_its_callback(
    ctx: AppContext, wiring: Wiring, org: Org
) -> None:
    org_id = _org_id(org)
    with_callback = await _create(ctx, wiring, org, 6)
    without = await _create(ctx, wiring, org, 1, callback=False)
    await _stop(ctx, org_id)
    batches = Batches()

    cancelled = await approvals_service.cancel_all_pending(
        _to_workers(ctx), org_id, None, batches.committed, batch_size=3
    )

    assert cancelled == 7
    assert batches.sizes == [3, 3, 1]
    assert sum(batches.callbacks) == 6  # one per request with a callback_url, none for the other
    assert set().union(*batches.ids) == set(with_callback) | set(without)
    assert await _statuses(ctx, org_id) == Counter({"cancelled": 7})
    assert await _deliveries_per_request(ctx, org_id) == Counter({i: 1 for i in with_callback})


async def test_a_stop_cut_short_leaves_the_rest_pending_and_running_it_again_finishes(
    ctx: AppContext, wiring: Wiring, org: Org
) -> None:
    org_id = _org_id(org)
    ids = await _create(ctx, wiring, org, 7)
    await _stop(ctx, org_id)

    async def crash_after_first(uow: UnitOfWork, results: list[TransitionResult]) -> None:
        raise Crash  # the process dies once the first batch has committed

    with pytest.raises(Crash):
        await approvals_service.cancel_all_pending(
            _to_workers(ctx), org_id, None, crash_after_first, batch_size=3
        )
    # The first batch is committed with its callbacks (handed to the workers, so a
    # worker sends them); the rest is still pending, in plain sight; the stop is still on.
    assert await _statuses(ctx, org_id) == Counter({"cancelled": 3, "pending": 4})
    assert sum((await _deliveries_per_request(ctx, org_id)).values()) == 3
    async with ctx.reading() as uow:
        org_row = await uow.session.get(Organization, org_id)
        assert org_row is not None and org_row.emergency_stop is True

    batches = Batches()
    again = await approvals_service.cancel_all_pending(
        _to_workers(ctx), org_id, None, batches.committed, batch_size=3
    )
    assert again == 4
    assert batches.sizes == [3, 1]
    assert await _statuses(ctx, org_id) == Counter({"cancelled": 7})
    assert await _deliveries_per_request(ctx, org_id) == Counter({i: 1 for i in ids})


async def test_a_request_settled_between_batches_is_not_cancelled_twice(
    ctx: AppContext, wiring: Wiring, org: Org
) -> None:
    org_id = _org_id(org)
    ids = await _create(ctx, wiring, org, 5)
    await _stop(ctx, org_id)
    batches = Batches()
    settled: list[uuid.UUID] = []

    async def committed(uow: UnitOfWork, results: list[TransitionResult]) -> None:
        await batches.committed(uow, results)
        if not settled:
            # Another writer cancels a request of a later batch in between.
            done = set().union(*batches.ids)
            settled.append(next(i for i in ids if i not in done))
            async with ctx.transaction() as other:
                await approvals_service.cancel_pending(other, org_id, None, settled, utcnow())

    cancelled = await approvals_service.cancel_all_pending(
        _to_workers(ctx), org_id, None, committed, batch_size=2
    )

    assert cancelled == 4
    assert settled[0] not in set().union(*batches.ids)
    assert await _statuses(ctx, org_id) == Counter({"cancelled": 5})
    assert await _deliveries_per_request(ctx, org_id) == Counter({i: 1 for i in ids})


async def test_a_request_created_while_the_stop_runs_is_cancelled_too(
    ctx: AppContext, wiring: Wiring, org: Org
) -> None:
    """A caller that authenticated before the stop committed may still create one."""
    org_id = _org_id(org)
    await _create(ctx, wiring, org, 3)
    await _stop(ctx, org_id)
    batches = Batches()
    late: list[uuid.UUID] = []

    async def committed(uow: UnitOfWork, results: list[TransitionResult]) -> None:
        await batches.committed(uow, results)
        if not late:
            late.extend(await _create(ctx, wiring, org, 1))

    cancelled = await approvals_service.cancel_all_pending(
        _to_workers(ctx), org_id, None, committed, batch_size=2
    )

    assert cancelled == 4
    assert batches.ids[-1] == set(late)
    assert await _statuses(ctx, org_id) == Counter({"cancelled": 4})


async def test_the_api_answers_the_count_over_several_batches_and_sends_each_callback(
    client: httpx.AsyncClient, org: Org, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(approvals_service, "CANCEL_BATCH_SIZE", 2)
    async with Receiver() as receiver:
        ids = {
            (await create_approval(client, org.member, callback_url=receiver.url))["id"]
            for _ in range(5)
        }
        response = await client.put(
            "/api/v1/emergency-stop",
            json={"active": True, "cancel_pending": True},
            headers=org.admin.headers,
        )
        assert response.status_code == 200, response.text
        assert response.json()["cancelled"] == 5
        requests = await receiver.wait_for(5, timeout=10)
    assert {orjson.loads(r.body)["request_id"] for r in requests} == ids
    assert {orjson.loads(r.body)["status"] for r in requests} == {"cancelled"}


@pytest.fixture
def cli_env(database_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("SIGNOFF_DATABASE_URL", database_url)
    monkeypatch.setenv("SIGNOFF_SECRET_KEY", SECRET_KEY)
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


async def test_the_cli_cancels_over_several_batches_and_makes_each_first_attempt(
    client: httpx.AsyncClient, org: Org, cli_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(approvals_service, "CANCEL_BATCH_SIZE", 2)
    async with Receiver() as receiver:
        ids = {
            (await create_approval(client, org.member, callback_url=receiver.url))["id"]
            for _ in range(5)
        }

        def invoke() -> Any:
            return CliRunner().invoke(
                cli_app,
                ["emergency-stop", "on", "--org", org.id, "--cancel-pending", "--json"],
                catch_exceptions=False,
            )

        result = await anyio.to_thread.run_sync(invoke)
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout) == {"org_id": org.id, "active": True, "cancelled": 5}
        assert "callbacks: 5 of 5 delivered on the first attempt" in result.stderr
        requests = await receiver.wait_for(5, timeout=10)
    assert {orjson.loads(r.body)["request_id"] for r in requests} == ids
    assert {r.headers["x-service-attempt"] for r in requests} == {"1"}
