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
    reset_at: int  # Unix seconds when the window ends

    @property
    def retry_after(self) -> int:
        return max(1, self.reset_at - int(time.time()))

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


def _window_end(window: Window) -> int:
    seconds = 3600 if window == "hour" else 60
    return (math.floor(time.time() / seconds) + 1) * seconds


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
        return RateLimitDecision(
            allowed, limit, max(0, stats.remaining), math.ceil(stats.reset_time)
        )

    async def reset(self) -> None:
        await self.storage.reset()

    async def check_ready(self) -> bool:
        try:
            return bool(await self.storage.check())
        except Exception:
            return False
