"""A process's alive key in Redis is written again as soon as Redis is back after a failure,
not a third of the lease later: meanwhile its queued runs would be taken for a dead process's."""

from __future__ import annotations

import asyncio
import time

from agents.bus import RunBus


class Flaky:
    """A Redis client whose first write fails."""

    def __init__(self) -> None:
        self.writes: list[float] = []

    async def set(self, *_: object, **__: object) -> None:
        self.writes.append(time.monotonic())
        if len(self.writes) == 1:
            raise ConnectionError("Redis is restarting")


async def test_the_alive_key_is_written_again_soon_after_a_failure() -> None:
    bus = RunBus("redis://127.0.0.1:1/0", alive_s=30)  # renewed every 10 s when all is well
    client = Flaky()
    bus.client = client
    alive = asyncio.create_task(bus._keep_alive())
    await asyncio.sleep(1.0)
    alive.cancel()
    assert len(client.writes) == 2  # the failed one, then again within the second
    assert client.writes[1] - client.writes[0] < 0.9
