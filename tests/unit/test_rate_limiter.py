"""The limiter's own counting, in this process's memory (``limits``' memory storage):
fixed windows per key and window length, refused calls counted, a reset forgets all."""

from __future__ import annotations

import time

from signoff.ratelimit.limiter import RateLimiter


async def test_calls_count_until_the_limit_then_are_refused_with_the_window_end() -> None:
    limiter = RateLimiter()
    before = time.time()
    decisions = [await limiter.hit("conn:a", 3) for _ in range(4)]
    assert [d.allowed for d in decisions] == [True, True, True, False]
    assert [d.remaining for d in decisions] == [2, 1, 0, 0]
    refused = decisions[-1]
    assert before + 3600 <= refused.reset_at <= time.time() + 3601
    assert 1 <= refused.retry_after <= 3600
    assert (b"retry-after", str(refused.retry_after).encode()) in refused.headers()


async def test_keys_and_window_lengths_count_apart() -> None:
    limiter = RateLimiter()
    for _ in range(3):
        await limiter.hit("conn:a", 10)
    assert (await limiter.hit("conn:b", 10)).remaining == 9
    assert (await limiter.hit("conn:a", 10, "minute")).remaining == 9
    assert (await limiter.peek("conn:a", 10)).remaining == 7


async def test_a_lowered_limit_counts_the_calls_already_made() -> None:
    limiter = RateLimiter()
    for _ in range(3):
        assert (await limiter.hit("conn:a", 10)).allowed
    assert not (await limiter.hit("conn:a", 2)).allowed


async def test_peeking_counts_nothing_and_reset_forgets_every_counter() -> None:
    limiter = RateLimiter()
    assert (await limiter.peek("ip:1", 5)).remaining == 5
    assert (await limiter.peek("ip:1", 5)).remaining == 5
    await limiter.hit("ip:1", 5)
    await limiter.reset()
    assert (await limiter.peek("ip:1", 5)).remaining == 5
    assert await limiter.check_ready()
