"""At shutdown a workflow run's lease is let go once the task driving it is over, never while
it still runs (another process would run it at the same time)."""

from __future__ import annotations

import asyncio
import threading

from agents.workflows.leases import RunLeases


async def test_let_go_frees_runs_whose_task_ended_and_keeps_a_stuck_ones() -> None:
    leases = RunLeases(None)
    release = threading.Event()

    async def drive(run_id: str, stuck: bool) -> None:
        await leases.take(run_id)
        try:
            await asyncio.sleep(30)  # cancelled by let_go, without releasing its lease
        except asyncio.CancelledError:
            if stuck:  # its clean-up waits for a handler's thread that does not end
                await asyncio.to_thread(release.wait, 5)
            raise

    done = asyncio.create_task(drive("cut", stuck=False))
    stuck = asyncio.create_task(drive("stuck", stuck=True))
    await asyncio.sleep(0.05)
    await leases.let_go(wait_s=0.1)
    try:
        assert done.cancelled()
        assert not leases.holds("cut")  # its task is over: another process may resume it
        assert leases.holds("stuck")  # still running here: its lease is kept
    finally:
        release.set()
        stuck.cancel()
        await asyncio.gather(stuck, return_exceptions=True)
