"""A thread lease's renewal goes on after a failed beat (a pool timeout, PostgreSQL
restarting): ending at the first failure let the lease expire under a run still going."""

from __future__ import annotations

import asyncio

from agents.state.leases import _renew


class Flaky:
    """A lease table whose first renewal fails."""

    def __init__(self) -> None:
        self.calls = 0

    async def renew(self, keys: list[str], holder: str, lease_s: float) -> set[str]:
        self.calls += 1
        if self.calls == 1:
            raise OSError("the pool timed out")
        return set(keys)


async def test_a_failed_renewal_is_tried_again_at_the_next_beat() -> None:
    table = Flaky()
    renewing = asyncio.create_task(_renew(table, "t1", "h", lease_s=0.03))  # type: ignore[arg-type]
    await asyncio.sleep(0.1)
    assert not renewing.done()
    renewing.cancel()
    assert table.calls >= 2
