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
from typing import Literal

from limits import RateLimitItem, RateLimitItemPerHour, RateLimitItemPerMinute
from limits.aio.storage import MemoryStorage, RedisStorage, Storage
from limits.aio.strategies import FixedWindowRateLimiter

logger = logging.getLogger(__name__)

Window = Literal["hour", "minute"]


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


def _item(limit: int, window: Window) -> RateLimitItem:
    return RateLimitItemPerHour(limit) if window == "hour" else RateLimitItemPerMinute(limit)


def _window_seconds(window: Window) -> int:
    return 3600 if window == "hour" else 60


def _window_end(window: Window) -> int:
    seconds = _window_seconds(window)
    return (math.floor(time.time() / seconds) + 1) * seconds


def _decision(allowed: bool, limit: int, remaining: int, reset_time: float) -> RateLimitDecision:
    retry_after = max(1, math.ceil(reset_time - time.time()))
    return RateLimitDecision(allowed, limit, max(0, remaining), math.ceil(reset_time), retry_after)


class RateLimiter:
    def __init__(self, redis_url: str | None = None, key_prefix: str = "signoff") -> None:
        self.storage: Storage
        if redis_url:
            uri = "async+" + redis_url if not redis_url.startswith("async+") else redis_url
            self.storage = RedisStorage(uri, implementation="redispy", key_prefix=key_prefix)
        else:
            self.storage = MemoryStorage()
        self._strategy = FixedWindowRateLimiter(self.storage)

    async def hit(self, key: str, limit: int, window: Window = "hour") -> RateLimitDecision:
        item = _item(limit, window)
        try:
            allowed = await self._strategy.hit(item, key)
            stats = await self._strategy.get_window_stats(item, key)
        except Exception:
            logger.exception("rate-limit storage failed; letting the call through")
            return RateLimitDecision(True, limit, limit, _window_end(window))
        return _decision(allowed, limit, stats.remaining, stats.reset_time)

    async def peek(self, key: str, limit: int, window: Window = "hour") -> RateLimitDecision:
        """Where ``key`` stands, without counting a call (for paths open to anyone)."""
        item = _item(limit, window)
        try:
            stats = await self._strategy.get_window_stats(item, key)
        except Exception:
            logger.exception("rate-limit storage failed; showing a full allowance")
            return RateLimitDecision(True, limit, limit, _window_end(window))
        reset_time = float(stats.reset_time)
        if stats.remaining >= limit:  # no window open: one would start now
            reset_time = time.time() + _window_seconds(window)
        return _decision(True, limit, stats.remaining, reset_time)

    async def reset(self) -> None:
        await self.storage.reset()

    async def check_ready(self) -> bool:
        try:
            return bool(await self.storage.check())
        except Exception:
            return False
