"""Recording attempts in batches (``webhooks.service.record_attempts``), on a real database.

A worker records the attempts that end together in one transaction, with one UPDATE per
group of deliveries that move the same way and one INSERT for all their log entries: each
attempt must still land on its own delivery, with its own number, and an attempt whose
claim was lost meanwhile must leave no trace.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

from sqlalchemy import select, update

from signoff.approvals import service as approvals_service
from signoff.approvals.schemas import CreateApprovalRequest
from signoff.common.ids import parse_id
from signoff.common.time import utcnow
from signoff.context import AppContext
from signoff.models import AuditEvent, WebhookAttempt, WebhookDelivery
from signoff.webhooks import service
from signoff.webhooks.delivery import AttemptResult
from signoff.webhooks.service import ClaimedDelivery, RetrySchedule
from signoff.wiring import Wiring
from tests.conftest import Org

OK = AttemptResult(True, 200, 3, "ok", None)
FAILED = AttemptResult(False, 500, 2, "always failing", "non-2xx status")


async def _cancelled_with_callbacks(wiring: Wiring, org: Org, count: int) -> list[ClaimedDelivery]:
    """``count`` requests cancelled in one transaction: their deliveries share one claim."""
    principal = await wiring.callers.authenticate(org.member.api_key)
    assert principal is not None
    org_id = parse_id(org.id)
    assert org_id is not None
    async with wiring.ctx.transaction() as uow:
        ids = []
        for index in range(count):
            payload = CreateApprovalRequest.model_validate(
                {
                    "title": f"t{index}",
                    "description": "d",
                    "priority": "low",
                    "callback_url": f"http://127.0.0.1:9/hook/{index}",
                }
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
    assert len(claimed) == count and len({c.token for c in claimed}) == 1
    return claimed


async def test_a_batch_records_each_attempt_on_its_own_delivery(
    ctx: AppContext, wiring: Wiring, org: Org
) -> None:
    succeeded, retried, taken_over = await _cancelled_with_callbacks(wiring, org, 3)
    async with ctx.transaction() as uow:  # another worker took this one over
        await uow.session.execute(
            update(WebhookDelivery)
            .where(WebhookDelivery.id == taken_over.id)
            .values(claim_token=uuid.uuid4())
        )

    schedule = RetrySchedule((1.0,))
    now = utcnow()
    async with ctx.transaction() as uow:
        recorded = await service.record_attempts(
            uow.webhooks,
            [(succeeded, OK, False), (retried, FAILED, False), (taken_over, FAILED, False)],
            now,
            schedule,
        )
    first, second, lost = recorded
    assert first is not None and (first.attempt, first.status) == (1, "succeeded")
    assert second is not None and (second.attempt, second.status) == (1, "pending")
    assert lost is None

    async with ctx.reading() as uow:
        deliveries = {d.id: d for d in (await uow.session.scalars(select(WebhookDelivery))).all()}
        attempts = (await uow.session.scalars(select(WebhookAttempt))).all()
        events = (
            await uow.session.scalars(select(AuditEvent).where(AuditEvent.type.like("callback.%")))
        ).all()
    done = deliveries[succeeded.id]
    assert (done.status, done.attempts, done.claim_token) == ("succeeded", 1, None)
    assert done.delivered_at == now
    waiting = deliveries[retried.id]
    assert (waiting.status, waiting.attempts, waiting.claim_token) == ("pending", 1, None)
    assert waiting.due_at == now + timedelta(seconds=1.0)
    assert waiting.delivered_at is None
    untouched = deliveries[taken_over.id]
    assert (untouched.attempts, untouched.last_attempt_at) == (0, None)

    by_delivery = {a.delivery_id: a for a in attempts}
    assert set(by_delivery) == {succeeded.id, retried.id}
    assert (by_delivery[succeeded.id].success, by_delivery[succeeded.id].status_code) == (
        True,
        200,
    )
    failed_entry = by_delivery[retried.id]
    assert (failed_entry.attempt, failed_entry.status_code, failed_entry.error) == (
        1,
        500,
        "non-2xx status",
    )
    assert failed_entry.response_body == "always failing"
    assert failed_entry.request_id == retried.request_id
    # Only a finished delivery has an audit event; the retried one is not finished yet.
    assert [(e.type, e.request_id) for e in events] == [
        ("callback.delivered", succeeded.request_id)
    ]

    # Its last attempt fails: the delivery is failed, with its own number and event.
    later = now + timedelta(seconds=2)
    async with ctx.transaction() as uow:
        [again] = await service.claim_due(uow.webhooks, later, 30.0, 10, {}, 16)
        assert (again.id, again.attempt_number) == (retried.id, 2)
        [final] = await service.record_attempts(
            uow.webhooks, [(again, FAILED, False)], later, schedule
        )
    assert final is not None and (final.attempt, final.status) == (2, "failed")
    async with ctx.reading() as uow:
        row = await uow.session.get(WebhookDelivery, retried.id)
        failed_events = (
            await uow.session.scalars(
                select(AuditEvent).where(AuditEvent.type == "callback.failed")
            )
        ).all()
    assert row is not None and (row.status, row.attempts) == ("failed", 2)
    assert [(e.request_id, e.data["attempt"]) for e in failed_events] == [(retried.request_id, 2)]
