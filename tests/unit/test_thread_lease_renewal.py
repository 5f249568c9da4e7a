"""A thread lease's renewal goes on after a failed beat (a pool timeout, PostgreSQL
restarting): ending at the first failure let the lease expire under a run still going. It
and a tool call's beats end with what they keep alive, a cancel dropped or not."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from agents.skills import once
from agents.state.lease_table import set_live
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
    set_live("h", True)
    lost: list[bool] = []
    renewing = asyncio.create_task(
        _renew(table, "t1", "h", 0.03, lambda: lost.append(True))  # type: ignore[arg-type]
    )
    await asyncio.sleep(0.1)
    assert not renewing.done()
    set_live("h", False)
    renewing.cancel()
    assert table.calls >= 2
    assert not lost


class CancelLosing:
    """A journal whose beat swallows a cancel, as Python 3.11's ``asyncio.wait_for`` in
    psycopg's pool does when the cancel lands as a connection comes."""

    def __init__(self) -> None:
        self.touches = 0
        self.touched = asyncio.Event()

    async def touch(self, claim: object) -> bool:
        self.touches += 1
        self.touched.set()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(0.05)
        return True


async def test_a_calls_beats_end_with_the_call_even_when_a_cancel_is_lost(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(once, "_BEAT_S", 0.01)
    calls = once.OnceCalls()
    journal = CancelLosing()
    calls.journal = journal  # type: ignore[assignment]
    made = asyncio.Event()
    beat = asyncio.create_task(calls._beat(object(), "pay", made))  # type: ignore[arg-type]
    await asyncio.wait_for(journal.touched.wait(), 2)  # a beat under way
    made.set()
    beat.cancel()
    await asyncio.wait_for(asyncio.gather(beat, return_exceptions=True), 2)
    touched = journal.touches
    await asyncio.sleep(0.1)
    assert journal.touches == touched  # no beat after the call was made
