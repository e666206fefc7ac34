"""Which due deliveries a worker claims first (``WebhookRepository.claim_due``), and how
many attempts a receiver gets at once (``webhooks/receivers.py``).

A receiver whose last attempt failed must not take turns from receivers that answer when
more is due than a worker can attempt at once: for a while after the failure (the hold)
its deliveries come after theirs, however old, and are taken at once when nothing else
is due. And a receiver gets its full number of attempts at once only after it has
answered.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import timedelta

from sqlalchemy import update

from signoff.approvals import service as approvals_service
from signoff.approvals.schemas import CreateApprovalRequest
from signoff.common.ids import parse_id
from signoff.common.time import utcnow
from signoff.context import AppContext
from signoff.models import WebhookDelivery
from signoff.webhooks import service
from signoff.webhooks.receivers import ReceiverRecord
from signoff.webhooks.service import target_of
from signoff.wiring import Wiring
from tests.conftest import Org

DEAD = "http://127.0.0.1:9/hook"
ALIVE = "http://127.0.0.1:10/hook"


async def _due_deliveries(wiring: Wiring, org: Org, urls: list[str]) -> dict[uuid.UUID, str]:
    """One cancelled request per url, its delivery due now and unclaimed: id -> url.
    The deliveries fall due one second apart, in the order of ``urls``."""
    principal = await wiring.callers.authenticate(org.member.api_key)
    org_id = parse_id(org.id)
    assert principal is not None and org_id is not None
    async with wiring.ctx.transaction() as uow:
        ids = []
        for index, url in enumerate(urls):
            payload = CreateApprovalRequest.model_validate(
                {"title": f"t{index}", "description": "d", "priority": "low", "callback_url": url}
            )
            created = await approvals_service.create_request(
                uow, principal, payload, wiring.ctx.box, utcnow()
            )
            ids.append(created.request.id)
        await approvals_service.cancel_pending(uow, org_id, None, ids, utcnow())
        # Kept held by this transaction's claim, as if the process stopped at the commit:
        # no attempt 1 is started.
        claimed = list(uow.outbox.claimed)
        uow.outbox.claimed.clear()
    start = utcnow() - timedelta(seconds=len(urls) + 1)
    async with wiring.ctx.transaction() as uow:
        for index, delivery in enumerate(claimed):
            await uow.session.execute(
                update(WebhookDelivery)
                .where(WebhookDelivery.id == delivery.id)
                .values(claim_token=None, due_at=start + timedelta(seconds=index))
            )
    return {delivery.id: delivery.url for delivery in claimed}


async def _claim(
    ctx: AppContext, limit: int, held: set[str], cap: Callable[[str], int] | int = 16
) -> list[str]:
    async with ctx.transaction() as uow:
        claimed = await service.claim_due(uow.webhooks, utcnow(), 30.0, limit, {}, cap, held)
    return sorted(delivery.url for delivery in claimed)


async def test_deliveries_to_a_held_receiver_come_after_the_others(
    ctx: AppContext, wiring: Wiring, org: Org
) -> None:
    await _due_deliveries(wiring, org, [DEAD, DEAD, DEAD, ALIVE, ALIVE])
    held = {target_of(DEAD)}

    # The dead receiver's deliveries are older, yet the live one's go first...
    assert await _claim(ctx, 2, held) == [ALIVE, ALIVE]
    # ...and the dead one's are taken as soon as nothing else is due.
    assert await _claim(ctx, 2, held) == [DEAD, DEAD]


async def test_without_failures_the_oldest_due_go_first(
    ctx: AppContext, wiring: Wiring, org: Org
) -> None:
    await _due_deliveries(wiring, org, [DEAD, DEAD, ALIVE, ALIVE])
    assert await _claim(ctx, 2, set()) == [DEAD, DEAD]


async def test_a_held_receiver_waits_however_old_its_backlog(
    ctx: AppContext, wiring: Wiring, org: Org
) -> None:
    # A backlog (after an outage, an emergency stop) is all long past due: the hold must
    # not depend on how late a delivery is, or it would hold nothing then.
    deliveries = await _due_deliveries(wiring, org, [DEAD, ALIVE, ALIVE])
    [dead] = [delivery_id for delivery_id, url in deliveries.items() if url == DEAD]
    async with ctx.transaction() as uow:
        await uow.session.execute(
            update(WebhookDelivery)
            .where(WebhookDelivery.id == dead)
            .values(due_at=utcnow() - timedelta(hours=1))
        )
    assert await _claim(ctx, 2, {target_of(DEAD)}) == [ALIVE, ALIVE]


async def test_a_receiver_not_yet_seen_to_answer_gets_one_attempt_at_a_time(
    ctx: AppContext, wiring: Wiring, org: Org
) -> None:
    await _due_deliveries(wiring, org, [DEAD, DEAD, DEAD, ALIVE, ALIVE])
    record = ReceiverRecord(per_target=16)
    record.note(target_of(ALIVE), success=True)

    assert await _claim(ctx, 5, set(), record.cap) == sorted([DEAD, ALIVE, ALIVE])


def test_a_receiver_gets_its_full_cap_only_once_it_answers() -> None:
    record = ReceiverRecord(per_target=16)
    assert record.cap("new:80") == 1  # not seen to answer yet: one attempt at a time
    record.note("a:80", success=True)
    record.note("b:80", success=False)
    assert (record.cap("a:80"), record.cap("b:80")) == (16, 1)
    assert record.held() == {"b:80"}

    record.note("a:80", success=False)
    record.note("b:80", success=True)
    assert (record.cap("a:80"), record.cap("b:80")) == (1, 16)
    assert record.held() == {"a:80"}


def test_the_record_of_receivers_is_bounded() -> None:
    record = ReceiverRecord(per_target=16, max_remembered=3)
    for target in ("a:80", "b:80", "c:80"):
        record.note(target, success=False)
    record.note("a:80", success=False)  # attempted again: now the most recent
    record.note("d:80", success=False)
    assert record.held() == {"c:80", "a:80", "d:80"}  # b, the least recent, forgotten


def test_a_failing_receiver_is_held_for_a_bounded_time() -> None:
    now = [100.0]
    record = ReceiverRecord(per_target=16, hold_seconds=10.0, clock=lambda: now[0])
    record.note("dead:80", success=False)
    record.note("alive:80", success=True)
    assert record.held() == {"dead:80"}
    now[0] += 9.9
    assert record.held() == {"dead:80"}
    now[0] += 0.2
    # Its deliveries compete in due order again, one attempt at a time: a probe.
    assert record.held() == set()
    assert record.cap("dead:80") == 1
    record.note("dead:80", success=False)  # the probe failed: held again
    assert record.held() == {"dead:80"}
