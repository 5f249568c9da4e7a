"""The SQLite store's thread: jobs run in the order given, one at a time, their results and
errors handed back; a job whose caller gave up still runs."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator

import pytest

from agents.state.serial import SerialThread


@pytest.fixture
def gate() -> Iterator[threading.Event]:
    """Holds a job on the thread until set (set at the end whatever happened)."""
    event = threading.Event()
    yield event
    event.set()


@pytest.fixture
def worker(gate: threading.Event) -> Iterator[SerialThread]:
    """A serial thread, shut down after the test (once its gate is open)."""
    thread = SerialThread("test-serial")
    yield thread
    gate.set()
    thread.shutdown()


async def test_jobs_run_in_order_on_one_thread_and_hand_back_results(
    worker: SerialThread,
) -> None:
    ran: list[tuple[int, str]] = []

    def job(n: int) -> int:
        time.sleep(0.001 * (5 - n))  # later jobs are quicker: order must not come from timing
        ran.append((n, threading.current_thread().name))
        return n * 10

    results = await asyncio.gather(*(worker.run(lambda n=n: job(n)) for n in range(5)))
    assert results == [0, 10, 20, 30, 40]
    assert [n for n, _ in ran] == [0, 1, 2, 3, 4]
    assert {name for _, name in ran} == {"test-serial"}


async def test_an_error_reaches_its_caller_and_the_thread_serves_on(worker: SerialThread) -> None:
    def broken() -> None:
        raise ValueError("no such table")

    with pytest.raises(ValueError, match="no such table"):
        await worker.run(broken)
    assert await worker.run(lambda: "still here") == "still here"


async def test_a_job_whose_caller_was_cancelled_still_runs(
    worker: SerialThread, gate: threading.Event
) -> None:
    done: list[str] = []
    blocking = asyncio.ensure_future(worker.run(gate.wait))
    waiting = asyncio.ensure_future(worker.run(lambda: done.append("written")))
    await asyncio.sleep(0.01)
    waiting.cancel()
    gate.set()
    await blocking
    assert await worker.run(lambda: list(done)) == ["written"]
    assert waiting.cancelled()


async def test_in_hand_counts_the_jobs_given_and_not_yet_through(
    worker: SerialThread, gate: threading.Event
) -> None:
    ran: list[str] = []
    blocking = asyncio.ensure_future(worker.run(gate.wait))
    await asyncio.sleep(0)  # given first
    worker.submit(lambda: ran.append("submitted"))
    await asyncio.sleep(0.01)
    assert worker.in_hand == 2
    gate.set()
    await blocking
    assert await worker.run(lambda: list(ran)) == ["submitted"]
    assert worker.in_hand == 0


async def test_drained_is_done_once_every_job_in_hand_is_through(
    worker: SerialThread, gate: threading.Event
) -> None:
    assert worker.drained().done()  # nothing in hand
    first = asyncio.ensure_future(worker.run(gate.wait))
    worker.submit(lambda: None)
    drained = worker.drained()
    await asyncio.sleep(0.01)
    assert not drained.done()
    gate.set()
    await first
    await asyncio.wait_for(drained, 5)
    assert worker.in_hand == 0
