"""A stream's deadlines: cut a silence or an endless reply, cost nothing when not waiting."""

from __future__ import annotations

import asyncio

from agents.models.deadline import StreamDeadline


async def test_past_its_limit_a_deadline_not_waited_on_stops_its_timer() -> None:
    # It rescheduled itself at its (past) end, over and over: a busy loop.
    checks = 0

    class Counted(StreamDeadline):
        def _check(self) -> None:
            nonlocal checks
            checks += 1
            super()._check()

    deadline = Counted(idle_s=0.02, total_s=0.05)
    await asyncio.sleep(0.3)  # the reader is busy elsewhere, past the whole limit
    deadline.close()
    assert checks < 20, checks
