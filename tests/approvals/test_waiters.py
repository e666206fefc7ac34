"""Long-poll wake-ups: a change is never missed between a reader's read and its wait."""

from __future__ import annotations

import asyncio
import uuid

from signoff.context import RequestWaiters


async def test_a_change_committed_before_the_wait_still_wakes_the_reader() -> None:
    waiters = RequestWaiters()
    request_id = uuid.uuid4()
    with waiters.watch(request_id) as changed:
        # The reader has read "pending"; the decision commits before it starts waiting.
        waiters.notify(request_id)
        await asyncio.wait_for(changed.wait(), 0.5)
    assert len(waiters) == 0


async def test_every_reader_of_a_request_is_woken_and_no_other() -> None:
    waiters = RequestWaiters()
    decided, other = uuid.uuid4(), uuid.uuid4()
    with waiters.watch(decided) as a, waiters.watch(decided) as b, waiters.watch(other) as c:
        waiters.notify(decided)
        assert a.is_set() and b.is_set()
        assert not c.is_set()
    assert len(waiters) == 0
