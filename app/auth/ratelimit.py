"""Requests per minute per key: in the process, or shared by every process in Redis."""

from __future__ import annotations

import time
from typing import Any, Protocol

from agents.bus import redis_client


class RateLimiter(Protocol):
    """Counts a key's requests in the current minute."""

    async def hit(self, key: str) -> float | None:
        """Count one request; None when allowed, else the seconds until the next minute."""
        ...

    async def add_tokens(self, key: str, tokens: int) -> None:
        """Count tokens a key's run used this minute."""
        ...

    async def tokens_over(self, key: str, limit: int) -> float | None:
        """None while the key's tokens this minute are under ``limit``, else the seconds
        until the next minute."""
        ...

    async def aclose(self) -> None:
        """Release connections."""
        ...


class MemoryRateLimiter:
    """A fixed one-minute window per key, in this process."""

    def __init__(self, per_minute: int) -> None:
        self.per_minute = per_minute
        self._counts: dict[str, tuple[int, int]] = {}
        self._tokens: dict[str, tuple[int, int]] = {}

    async def add_tokens(self, key: str, tokens: int) -> None:
        """See ``RateLimiter.add_tokens``."""
        window = int(time.time() // 60)
        seen_window, count = self._tokens.get(key, (window, 0))
        self._tokens[key] = (window, (count if seen_window == window else 0) + tokens)

    async def tokens_over(self, key: str, limit: int) -> float | None:
        """See ``RateLimiter.tokens_over``."""
        now = time.time()
        window = int(now // 60)
        seen_window, count = self._tokens.get(key, (window, 0))
        used = count if seen_window == window else 0
        return None if used < limit else (window + 1) * 60 - now

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
    """The same window in Redis (``INCR`` and ``EXPIRE``), shared by every process whose
    keys start with ``prefix`` (``SKILLDESK_REDIS_PREFIX``: services sharing one Redis keep
    their counts apart)."""

    def __init__(self, per_minute: int, url: str, prefix: str = "skilldesk") -> None:
        self.per_minute = per_minute
        self.prefix = prefix
        self.client: Any = redis_client(url)

    async def hit(self, key: str) -> float | None:
        """See ``RateLimiter.hit``."""
        now = time.time()
        window = int(now // 60)
        name = f"{self.prefix}:ratelimit:{key}:{window}"
        async with self.client.pipeline(transaction=True) as pipe:
            pipe.incr(name)
            pipe.expire(name, 120)
            count, _ = await pipe.execute()
        return None if int(count) <= self.per_minute else (window + 1) * 60 - now

    async def add_tokens(self, key: str, tokens: int) -> None:
        """See ``RateLimiter.add_tokens``."""
        name = f"{self.prefix}:tokens:{key}:{int(time.time() // 60)}"
        async with self.client.pipeline(transaction=True) as pipe:
            pipe.incrby(name, tokens)
            pipe.expire(name, 120)
            await pipe.execute()

    async def tokens_over(self, key: str, limit: int) -> float | None:
        """See ``RateLimiter.tokens_over``."""
        now = time.time()
        window = int(now // 60)
        used = int(await self.client.get(f"{self.prefix}:tokens:{key}:{window}") or 0)
        return None if used < limit else (window + 1) * 60 - now

    async def aclose(self) -> None:
        """See ``RateLimiter.aclose``."""
        await self.client.aclose()


def rate_limiter(
    per_minute: int,
    redis_url: str | None,
    tokens_per_minute: int = 0,
    redis_prefix: str = "skilldesk",
) -> RateLimiter | None:
    """The limiter the settings ask for (None: no limit). A limit of 0 is none; with only a
    token limit, requests are counted against no limit."""
    if per_minute <= 0 and tokens_per_minute <= 0:
        return None
    per_minute = per_minute if per_minute > 0 else 2**62
    if redis_url:
        return RedisRateLimiter(per_minute, redis_url, redis_prefix)
    return MemoryRateLimiter(per_minute)
