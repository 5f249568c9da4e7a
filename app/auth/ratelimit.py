"""Requests per minute per key: in the process, or shared by every process in Redis."""

from __future__ import annotations

import time
from typing import Any, Protocol


class RateLimiter(Protocol):
    """Counts a key's requests in the current minute."""

    async def hit(self, key: str) -> float | None:
        """Count one request; None when allowed, else the seconds until the next minute."""
        ...

    async def aclose(self) -> None:
        """Release connections."""
        ...


class MemoryRateLimiter:
    """A fixed one-minute window per key, in this process."""

    def __init__(self, per_minute: int) -> None:
        self.per_minute = per_minute
        self._counts: dict[str, tuple[int, int]] = {}

    async def hit(self, key: str) -> float | None:
        """See ``RateLimiter.hit``."""
        now = time.time()
        window = int(now // 60)
        if len(self._counts) > 100_000:  # forget earlier windows
            self._counts = {k: v for k, v in self._counts.items() if v[0] == window}
        seen_window, count = self._counts.get(key, (window, 0))
        count = count + 1 if seen_window == window else 1
        self._counts[key] = (window, count)
        return None if count <= self.per_minute else (window + 1) * 60 - now

    async def aclose(self) -> None:
        """See ``RateLimiter.aclose``."""


class RedisRateLimiter:
    """The same window in Redis (``INCR`` and ``EXPIRE``), shared by every process."""

    def __init__(self, per_minute: int, url: str) -> None:
        import redis.asyncio as redis

        self.per_minute = per_minute
        self.client: Any = redis.Redis.from_url(url)

    async def hit(self, key: str) -> float | None:
        """See ``RateLimiter.hit``."""
        now = time.time()
        window = int(now // 60)
        name = f"skilldesk:ratelimit:{key}:{window}"
        async with self.client.pipeline(transaction=True) as pipe:
            pipe.incr(name)
            pipe.expire(name, 120)
            count, _ = await pipe.execute()
        return None if int(count) <= self.per_minute else (window + 1) * 60 - now

    async def aclose(self) -> None:
        """See ``RateLimiter.aclose``."""
        await self.client.aclose()


def rate_limiter(per_minute: int, redis_url: str | None) -> RateLimiter | None:
    """The limiter the settings ask for (None: no limit)."""
    if per_minute <= 0:
        return None
    if redis_url:
        return RedisRateLimiter(per_minute, redis_url)
    return MemoryRateLimiter(per_minute)
