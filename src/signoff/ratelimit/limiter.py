"""Fixed-window rate limits (decisions.md section 7), in memory or in Redis.

One node keeps its counters in memory; with ``SIGNOFF_REDIS_URL`` every replica counts in
Redis, so a connection's hourly quota is shared fleet-wide. If Redis cannot be reached the
call is let through and the failure logged: an approval gateway that stops approving
because a cache is down would do more harm than a briefly uncounted burst.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from typing import Literal, Protocol

from limits.aio.storage import MemoryStorage, RedisStorage

logger = logging.getLogger(__name__)

Window = Literal["hour", "minute"]


class CounterStore(Protocol):
    """What the limiter asks of a store: ``limits``' memory storage, or its Redis one."""

    async def incr(self, key: str, expiry: int, amount: int = 1) -> int: ...
    async def get(self, key: str) -> int: ...
    async def get_expiry(self, key: str) -> float: ...
    async def reset(self) -> int | None: ...
    async def check(self) -> bool: ...


@dataclass(frozen=True)
class RateLimitDecision:
    allowed: bool
    limit: int
    remaining: int
    reset_at: int  # Unix seconds when the window ends (rounded up)
    # Seconds until then, rounded up from the exact end: never more than the window.
    retry_after: int = 1

    def headers(self) -> list[tuple[bytes, bytes]]:
        headers = [
            (b"x-ratelimit-limit", str(self.limit).encode()),
            (b"x-ratelimit-remaining", str(self.remaining).encode()),
            (b"x-ratelimit-reset", str(self.reset_at).encode()),
        ]
        if not self.allowed:
            headers.append((b"retry-after", str(self.retry_after).encode()))
        return headers


def _window_seconds(window: Window) -> int:
    return 3600 if window == "hour" else 60


def _window_end(window: Window) -> int:
    seconds = _window_seconds(window)
    return (math.floor(time.time() / seconds) + 1) * seconds


def _decision(allowed: bool, limit: int, remaining: int, reset_time: float) -> RateLimitDecision:
    retry_after = max(1, math.ceil(reset_time - time.time()))
    return RateLimitDecision(allowed, limit, max(0, remaining), math.ceil(reset_time), retry_after)


class RateLimiter:
    """Fixed windows counted per key and window length, whatever the limit.

    A counter does not depend on the limit it is compared with (``limits``' own keys
    include the amount), so lowering a connection's limit or the operator's ceiling
    mid-window counts the calls already made instead of opening a fresh allowance.
    """

    def __init__(self, redis_url: str | None = None, key_prefix: str = "signoff") -> None:
        self.storage: CounterStore
        if redis_url:
            uri = "async+" + redis_url if not redis_url.startswith("async+") else redis_url
            self.storage = RedisStorage(uri, implementation="redispy", key_prefix=key_prefix)
        else:
            # limits' own memory store; a counter of our own earned too little to stay
            # (docs/decisions/0019-replacements-earn-ten-percent.md).
            self.storage = MemoryStorage()

    async def hit(self, key: str, limit: int, window: Window = "hour") -> RateLimitDecision:
        counter = f"{window}/{key}"
        try:
            # Refused calls count too: a caller hammering past its limit stays limited.
            count = await self.storage.incr(counter, _window_seconds(window))
            reset_time = await self.storage.get_expiry(counter)
        except Exception:
            logger.exception("rate-limit storage failed; letting the call through")
            return RateLimitDecision(True, limit, limit, _window_end(window))
        return _decision(count <= limit, limit, limit - count, reset_time)

    async def peek(self, key: str, limit: int, window: Window = "hour") -> RateLimitDecision:
        """Where ``key`` stands, without counting a call (for paths open to anyone)."""
        counter = f"{window}/{key}"
        try:
            count = await self.storage.get(counter)
            reset_time = await self.storage.get_expiry(counter)
        except Exception:
            logger.exception("rate-limit storage failed; showing a full allowance")
            return RateLimitDecision(True, limit, limit, _window_end(window))
        if count == 0:  # no window open: one would start now
            reset_time = time.time() + _window_seconds(window)
        return _decision(True, limit, limit - count, reset_time)

    async def first_within(self, key: str, seconds: int) -> bool:
        """Whether this is the first call for ``key`` in a window of ``seconds`` that the
        first call opened (a pace, not a count: refused calls do not move the window)."""
        try:
            return await self.storage.incr(f"{seconds}s/{key}", seconds) == 1
        except Exception:
            logger.exception("rate-limit storage failed; letting the call through")
            return True

    async def reset(self) -> None:
        await self.storage.reset()

    async def check_ready(self) -> bool:
        try:
            return bool(await self.storage.check())
        except Exception:
            return False
