"""One org's event that cannot be sealed holds back that org alone: the other orgs'
chains go on and verify, its events stay unsealed, it is logged without its data, and
its events are sealed, in order, once they can be (both databases; on SQLite the sealed
mark moves past it)."""

from __future__ import annotations

import logging

import pytest
from sqlalchemy import update

from signoff.audit.sealing import held_back_orgs, seal_once, seal_org_now
from signoff.audit.service import Unsealable
from signoff.common.poison import PoisonedRows
from signoff.context import AppContext
from tests.audit.support import (
    EVENTS,
    after_start,
    chained_ids,
    event_rows,
    events_at,
    sealed_org,
    verified,
    write_events,
)

# RFC 8785 refuses an integer an IEEE 754 double cannot hold: the event cannot be hashed.
UNHASHABLE = 2**60


async def test_an_event_that_cannot_be_sealed_holds_back_its_org_alone(
    ctx: AppContext, caplog: pytest.LogCaptureFixture
) -> None:
    bad_org, good_org = await sealed_org(ctx, "Poisoned"), await sealed_org(ctx, "Healthy")
    kept = await chained_ids(ctx, bad_org)
    healthy = await chained_ids(ctx, good_org)
    poison = event_rows(bad_org, after_start([1]), data=lambda _: {"n": UNHASHABLE})
    b1, poisoned_id, a2, b2 = await write_events(
        ctx, events_at(good_org, [1]) + poison + events_at(bad_org, [2]) + events_at(good_org, [2])
    )
    with caplog.at_level(logging.ERROR):
        assert await seal_once(ctx, verify=False) == 2
    assert await chained_ids(ctx, good_org) == [*healthy, b1, b2]
    result = await verified(ctx, good_org)
    assert result.ok, result.problem
    assert await chained_ids(ctx, bad_org) == kept  # nothing of it past the bad event
    reported = [r for r in caplog.records if r.name == "signoff.poison"]
    assert len(reported) == 1
    assert str(bad_org) in reported[0].getMessage()
    assert str(poisoned_id) in reported[0].getMessage()
    assert str(UNHASHABLE) not in caplog.text  # the event's data stays out of the log

    # Still bad: the org is tried again and held back again, the other org sealed on.
    (a3,) = await write_events(ctx, events_at(bad_org, [3]))
    (b3,) = await write_events(ctx, events_at(good_org, [3]))
    poisoned = held_back_orgs()
    assert await seal_once(ctx, verify=False, poisoned=poisoned) == 1
    assert await chained_ids(ctx, good_org) == [*healthy, b1, b2, b3]
    assert await chained_ids(ctx, bad_org) == kept
    assert poisoned.parked("audit_seal") == {bad_org}
    assert await seal_once(ctx, verify=False, poisoned=poisoned) == 0  # not tried again yet
    with pytest.raises(Unsealable):  # an export: the org's chain cannot be made complete
        await seal_org_now(ctx, bad_org, checkpoint=True)

    # Mended: its events are sealed in their order, and its chain verifies.
    async with ctx.db.write_transaction() as session:
        await session.execute(update(EVENTS).where(EVENTS.c.id == poisoned_id).values(data={}))
    await seal_once(ctx, verify=False, poisoned=PoisonedRows())
    assert await chained_ids(ctx, bad_org) == [*kept, poisoned_id, a2, a3]
    result = await verified(ctx, bad_org)
    assert result.ok, result.problem
