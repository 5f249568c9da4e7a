"""The service's Redis clients: one whose commands wait for a free connection, and the check
at start that names the setting when Redis cannot be reached."""

from __future__ import annotations

import contextlib
from typing import Any

from agents.errors import ConfigError

REDIS_CONNECTIONS = 1000  # a process's connections to Redis at most (readers block on one)
REDIS_WAIT_S = 10.0  # a command waits this long for a free one, then fails as Redis down
# A command's reply (or a connection's start) waits this long, then fails as Redis down:
# without it, a Redis that stops answering without closing (stopped, a dead link) holds
# every request behind it for as long as TCP takes to give up. Above the longest blocking
# read (a reader's ``XREAD BLOCK``, ``POLL_S``).
REDIS_SOCKET_TIMEOUT_S = 5.0


def redis_client(url: str) -> Any:
    """A client of the Redis at ``url`` whose commands wait for a free connection (up to
    ``REDIS_WAIT_S``) rather than fail. redis-py's default pool fails the 101st command at
    once ("Too many connections"), and every reader of a run another process runs holds a
    connection while it waits for the next event: at load, 200 chats alternating between
    two processes, claims of Idempotency-Keys and run events went unwritten.

    A command to a Redis that stops answering fails after ``REDIS_SOCKET_TIMEOUT_S``; an
    idle connection (a pub/sub listener's too) is checked with a PING before it is used
    again after twice that, so a link that died silently is found rather than waited on."""
    import redis.asyncio as redis

    pool = redis.BlockingConnectionPool.from_url(
        url,
        max_connections=REDIS_CONNECTIONS,
        timeout=REDIS_WAIT_S,
        socket_timeout=REDIS_SOCKET_TIMEOUT_S,
        socket_connect_timeout=REDIS_SOCKET_TIMEOUT_S,
        health_check_interval=2 * REDIS_SOCKET_TIMEOUT_S,
    )
    return redis.Redis.from_pool(pool)  # the client closes its pool with it


async def check_redis(url: str) -> None:
    """Reach Redis at ``url`` once (a PING, in its database), at start.

    Raises:
        ConfigError: naming ``SKILLDESK_REDIS_URL``, when Redis cannot be reached or refuses
            (a wrong host or port, a database number it does not have, a password).
    """
    import redis.asyncio as redis

    shown = redact(url)
    try:
        client: Any = redis.Redis.from_url(url, socket_connect_timeout=5, socket_timeout=5)
    except ValueError as exc:
        raise ConfigError(
            f"Redis URL {shown} (SKILLDESK_REDIS_URL) is not valid: {exc}",
            fix="use redis://host:6379/0, or leave SKILLDESK_REDIS_URL unset for one process",
        ) from None
    try:
        await client.ping()
    except Exception as exc:
        raise ConfigError(
            f"cannot reach Redis at {shown} (SKILLDESK_REDIS_URL): {exc}",
            fix="check that Redis is running and that SKILLDESK_REDIS_URL names its host, "
            "port and database number (redis://host:6379/0)",
        ) from None
    finally:
        with contextlib.suppress(Exception):
            await client.aclose()


def redact(url: str) -> str:
    """``url`` without its password."""
    scheme, sep, rest = url.partition("://")
    if not sep or "@" not in rest:
        return url
    creds, host = rest.rsplit("@", 1)
    user = creds.split(":", 1)[0]
    return f"{scheme}://{user}{':***' if ':' in creds else ''}@{host}"
