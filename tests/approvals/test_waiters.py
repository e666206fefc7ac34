"""Long-poll wake-ups: a change is never missed between a reader's read and its wait."""

from __future__ import annotations

import asyncio
import uuid

from signoff.common.watchers import Watchers


async def test_a_change_committed_before_the_wait_still_wakes_the_reader() -> None:
    waiters: Watchers[uuid.UUID] = Watchers()
    request_id = uuid.uuid4()
    with waiters.watch(request_id) as changed:
        # The reader has read "pending"; the decision commits before it starts waiting.
        waiters.notify(request_id)
        await asyncio.wait_for(changed.wait(), 0.5)
    assert len(waiters) == 0


async def test_every_reader_of_a_request_is_woken_and_no_other() -> None:
    waiters: Watchers[uuid.UUID] = Watchers()
    decided, other = uuid.uuid4(), uuid.uuid4()
    with waiters.watch(decided) as a, waiters.watch(decided) as b, waiters.watch(other) as c:
        assert waiters.waiting() == 3
        waiters.notify(decided)
        assert a.is_set() and b.is_set()
        assert not c.is_set()
    assert len(waiters) == 0


async def test_closing_wakes_every_reader_for_good() -> None:
    waiters: Watchers[uuid.UUID] = Watchers()
    with waiters.watch(uuid.uuid4()) as a, waiters.watch(uuid.uuid4()) as b:
        waiters.close()
        assert a.is_set() and b.is_set()
    assert waiters.closing


async def test_each_watch_runs_the_hook_first() -> None:
    """Where the process starts hearing other processes' changes (``AppContext``)."""
    calls: list[int] = []
    waiters: Watchers[str] = Watchers(on_watch=lambda: calls.append(len(waiters)))
    with waiters.watch("a"), waiters.watch("b"):
        pass
    assert calls == [0, 1]  # before the watcher registers
