"""After the commit, once: the unit of work starts attempt 1 of the callbacks it wrote.

``AppContext.transaction`` hands off what a committed transaction enqueued, exactly once
(no endpoint starts it), and never what a rolled-back one enqueued.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from bench.receiver import Receiver
from sqlalchemy import func, select

from signoff.approvals import service as approvals_service
from signoff.approvals.schemas import CreateApprovalRequest
from signoff.common.ids import parse_id
from signoff.common.time import utcnow
from signoff.context import AppContext
from signoff.models import WebhookDelivery
from signoff.webhooks.service import FirstAttempt, FirstAttemptPolicy, FirstAttempts, Outbox
from signoff.wiring import Wiring
from tests.conftest import Org


class Rollback(Exception):
    pass


class CountedHandOffs:
    """Counts the dispatcher's hand-offs, and the deliveries each held."""

    def __init__(self, wiring: Wiring, monkeypatch: pytest.MonkeyPatch) -> None:
        self.sizes: list[int] = []
        real = wiring.webhooks.after_commit

        async def after_commit(outbox: Outbox, how: FirstAttemptPolicy) -> FirstAttempts:
            self.sizes.append(len(outbox.claimed))
            return await real(outbox, how)

        monkeypatch.setattr(wiring.webhooks, "after_commit", after_commit)


async def _pending(wiring: Wiring, org: Org, url: str, count: int = 1) -> list[uuid.UUID]:
    principal = await wiring.callers.authenticate(org.member.api_key)
    assert principal is not None
    body: dict[str, Any] = {"title": "t", "description": "d", "priority": "low"}
    ids = []
    async with wiring.ctx.transaction() as uow:
        for _ in range(count):
            payload = CreateApprovalRequest.model_validate({**body, "callback_url": url})
            created = await approvals_service.create_request(
                uow, principal, payload, wiring.ctx.box, utcnow()
            )
            ids.append(created.request.id)
    assert uow.first_attempts.count == 0  # a create writes no callback
    return ids


def _org_id(org: Org) -> uuid.UUID:
    org_id = parse_id(org.id)
    assert org_id is not None
    return org_id


async def _deliveries(ctx: AppContext) -> int:
    async with ctx.reading() as uow:
        return int(await uow.session.scalar(select(func.count()).select_from(WebhookDelivery)))


async def test_a_committed_transactions_callbacks_are_attempted_once_after_the_commit(
    ctx: AppContext, wiring: Wiring, org: Org, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with Receiver() as receiver:
        ids = await _pending(wiring, org, receiver.url, count=2)
        handed = CountedHandOffs(wiring, monkeypatch)
        async with ctx.transaction() as uow:
            await approvals_service.cancel_pending(uow, _org_id(org), None, ids, utcnow())
            assert len(uow.outbox.claimed) == 2
            assert receiver.received == []  # nothing is sent before the commit
        assert handed.sizes == [2]
        assert uow.outbox.claimed == []
        assert uow.first_attempts.delivered and uow.first_attempts.count == 2
        assert {r.headers["x-service-attempt"] for r in receiver.received} == {"1"}
        assert len(receiver.received) == 2
    assert await _deliveries(ctx) == 2


async def test_a_rolled_back_transactions_callbacks_are_never_handed_off(
    ctx: AppContext, wiring: Wiring, org: Org, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with Receiver() as receiver:
        ids = await _pending(wiring, org, receiver.url)
        handed = CountedHandOffs(wiring, monkeypatch)
        with pytest.raises(Rollback):
            async with ctx.transaction() as uow:
                await approvals_service.cancel_pending(uow, _org_id(org), None, ids, utcnow())
                assert len(uow.outbox.claimed) == 1
                raise Rollback
        assert handed.sizes == []
        assert uow.first_attempts.count == 0
        assert receiver.connections == 0
    assert await _deliveries(ctx) == 0


async def test_a_batch_hands_its_callbacks_to_the_workers_instead(
    ctx: AppContext, wiring: Wiring, org: Org, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with Receiver() as receiver:
        ids = await _pending(wiring, org, receiver.url, count=3)
        handed = CountedHandOffs(wiring, monkeypatch)
        async with ctx.transaction(FirstAttempt.BY_WORKERS) as uow:
            await approvals_service.cancel_pending(uow, _org_id(org), None, ids, utcnow())
        assert handed.sizes == [3]
        assert (uow.first_attempts.made, uow.first_attempts.handed_off) == ([], 3)
        assert receiver.connections == 0  # no worker runs in this test
    async with ctx.reading() as read:
        claims = await read.session.scalars(select(WebhookDelivery.claim_token))
        assert set(claims.all()) == {None}  # released: any worker may take them now


async def test_a_transaction_draws_its_lease_token_only_when_it_writes_a_callback(
    ctx: AppContext, wiring: Wiring, org: Org
) -> None:
    """Every write transaction holds an outbox; its lease token (a new id) is drawn when
    a callback is written, not for the creates and writes that have none."""
    principal = await wiring.callers.authenticate(org.member.api_key)
    assert principal is not None
    async with Receiver() as receiver:
        payload = CreateApprovalRequest.model_validate(
            {"title": "t", "description": "d", "priority": "low", "callback_url": receiver.url}
        )
        async with ctx.transaction() as uow:
            created = await approvals_service.create_request(
                uow, principal, payload, wiring.ctx.box, utcnow()
            )
        assert "token" not in vars(uow.outbox)  # a create writes no callback
        async with ctx.transaction() as uow:
            ids = [created.request.id]
            await approvals_service.cancel_pending(uow, _org_id(org), None, ids, utcnow())
            assert [d.token for d in uow.outbox.claimed] == [uow.outbox.token]
    async with ctx.reading() as read:
        claims = await read.session.scalars(select(WebhookDelivery.claim_token))
        assert set(claims.all()) <= {None, uow.outbox.token}
