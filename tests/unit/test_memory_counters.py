"""The in-memory rate-limit counters: fixed windows that end, and keys that go away."""

from __future__ import annotations

from signoff.ratelimit.memory import SWEEP_SECONDS, MemoryCounters


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


async def test_calls_count_in_a_window_that_ends_when_it_was_opened_for() -> None:
    clock = Clock()
    counters = MemoryCounters(clock)
    assert [await counters.incr("hour/a", 3600) for _ in range(3)] == [1, 2, 3]
    assert await counters.get_expiry("hour/a") == 1_000_000.0 + 3600
    clock.now += 3599
    assert await counters.incr("hour/a", 3600) == 4  # the same window: not reopened
    assert await counters.get("hour/a") == 4
    clock.now += 1  # the window's end
    assert await counters.get("hour/a") == 0
    assert await counters.incr("hour/a", 3600) == 1
    assert await counters.get_expiry("hour/a") == clock.now + 3600


async def test_keys_count_apart() -> None:
    counters = MemoryCounters(Clock())
    await counters.incr("hour/a", 3600)
    await counters.incr("hour/a", 3600)
    assert await counters.incr("hour/b", 3600) == 1
    assert await counters.incr("minute/a", 60) == 1
    assert await counters.get("hour/a") == 2


async def test_an_unknown_key_has_no_calls_and_no_open_window() -> None:
    clock = Clock()
    counters = MemoryCounters(clock)
    assert await counters.get("hour/nobody") == 0
    assert await counters.get_expiry("hour/nobody") == clock.now
    assert len(counters) == 0  # reading does not open a window


async def test_expired_counters_of_callers_that_never_return_are_swept() -> None:
    clock = Clock()
    counters = MemoryCounters(clock)
    for address in range(1000):
        await counters.incr(f"minute/ip:{address}", 60)
    await counters.incr("hour/steady", 3600)
    assert len(counters) == 1001
    clock.now += SWEEP_SECONDS
    await counters.incr("hour/steady", 3600)  # any call may sweep, once it is due
    assert len(counters) == 1
    assert await counters.get("hour/steady") == 2


async def test_reset_forgets_every_counter() -> None:
    counters = MemoryCounters(Clock())
    await counters.incr("hour/a", 3600)
    assert await counters.reset() == 1
    assert await counters.get("hour/a") == 0
    assert await counters.check()
