"""The service's Redis client gives up on a Redis that stops answering, in bounded time,
rather than waiting for TCP (minutes): every request behind it would wait as long."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from redis.exceptions import TimeoutError as RedisTimeoutError

from agents.bus import connection
from agents.bus.common import POLL_S
from agents.bus.connection import redis_client


@pytest.fixture
async def silent() -> AsyncIterator[str]:
    """A Redis that takes connections and never answers (stopped, or a dead link)."""
    held: list[asyncio.StreamWriter] = []

    async def hold(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    yield f"redis://127.0.0.1:{port}/0"
    for writer in held:
        writer.close()
    server.close()


async def test_a_command_to_a_redis_that_stops_answering_fails_in_time(
    silent: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(connection, "REDIS_SOCKET_TIMEOUT_S", 0.3)
    client = redis_client(silent)
    loop = asyncio.get_running_loop()
    started = loop.time()
    try:
        with pytest.raises(RedisTimeoutError):
            await asyncio.wait_for(client.get("k"), timeout=10)
    finally:
        await client.aclose()
    assert loop.time() - started < 2


def test_the_socket_timeout_outlasts_the_longest_blocking_read() -> None:
    # A reader blocks on XREAD for POLL_S: a socket timeout shorter than that would fail
    # every idle reader as if Redis were gone.
    assert connection.REDIS_SOCKET_TIMEOUT_S >= 3 * POLL_S
