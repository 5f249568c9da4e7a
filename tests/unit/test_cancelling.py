"""Tasks stopped for good, a dropped cancel or not (Python 3.11's ``asyncio.wait_for``
drops a cancel that lands as its result comes: a loop of such calls went on for good)."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from agents import cancelling
from agents.cancelling import stop_tasks


async def test_a_task_that_drops_a_cancel_is_cancelled_again_until_it_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(cancelling, "AGAIN_S", 0.05)
    beats = 0

    async def loop_dropping_the_first_cancel() -> None:
        nonlocal beats
        dropped = False
        while True:
            beats += 1
            try:
                await asyncio.sleep(0.01)
            except asyncio.CancelledError:
                if dropped:
                    raise
                dropped = True  # as wait_for does when its result came with the cancel

    async def ends_at_once() -> None:
        return None

    async def fails() -> None:
        raise OSError("gone")

    looping = asyncio.create_task(loop_dropping_the_first_cancel())
    done = asyncio.create_task(ends_at_once())
    failing = asyncio.create_task(fails())
    await asyncio.sleep(0.03)
    looping.cancel()
    with pytest.raises(TimeoutError):  # a cancel and a wait alone: it goes on
        await asyncio.wait_for(asyncio.shield(looping), 0.2)
    await asyncio.wait_for(stop_tasks([looping, done, None, failing]), 2)
    assert looping.cancelled()
    assert done.done()
    assert isinstance(failing.exception(), OSError)
    ended_at = beats
    await asyncio.sleep(0.05)
    assert beats == ended_at
    with contextlib.suppress(asyncio.CancelledError):
        await looping


async def test_a_stop_within_a_bound_returns_the_tasks_still_going(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(cancelling, "AGAIN_S", 0.05)
    released = asyncio.Event()

    async def ends_only_when_released() -> None:
        while not released.is_set():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(0.01)

    async def ends() -> None:
        await asyncio.sleep(1)

    stubborn = asyncio.create_task(ends_only_when_released())
    willing = asyncio.create_task(ends())
    await asyncio.sleep(0)
    left = await asyncio.wait_for(stop_tasks([stubborn, willing], within_s=0.2), 2)
    assert left == {stubborn}
    assert willing.cancelled()
    released.set()
    await asyncio.wait_for(stubborn, 2)
