"""The SQLite store's thread: jobs run in the order given, one at a time, their results and
errors handed back; a job whose caller gave up still runs."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from agents.state.checkpointers import SerialThread


async def test_jobs_run_in_order_on_one_thread_and_hand_back_results() -> None:
    worker = SerialThread("test-serial")
    ran: list[tuple[int, str]] = []

    def job(n: int) -> int:
        time.sleep(0.001 * (5 - n))  # later jobs are quicker: order must not come from timing
        ran.append((n, threading.current_thread().name))
        return n * 10

    try:
        results = await asyncio.gather(*(worker.run(lambda n=n: job(n)) for n in range(5)))
    finally:
        worker.shutdown()
    assert results == [0, 10, 20, 30, 40]
    assert [n for n, _ in ran] == [0, 1, 2, 3, 4]
    assert {name for _, name in ran} == {"test-serial"}


async def test_an_error_reaches_its_caller_and_the_thread_serves_on() -> None:
    worker = SerialThread("test-serial")

    def broken() -> None:
        raise ValueError("no such table")

    try:
        with pytest.raises(ValueError, match="no such table"):
            await worker.run(broken)
        assert await worker.run(lambda: "still here") == "still here"
    finally:
        worker.shutdown()


async def test_a_job_whose_caller_was_cancelled_still_runs() -> None:
    worker = SerialThread("test-serial")
    gate = threading.Event()
    done: list[str] = []
    try:
        blocking = asyncio.ensure_future(worker.run(gate.wait))
        waiting = asyncio.ensure_future(worker.run(lambda: done.append("written")))
        await asyncio.sleep(0.01)
        waiting.cancel()
        gate.set()
        await blocking
        assert await worker.run(lambda: list(done)) == ["written"]
        assert waiting.cancelled()
    finally:
        worker.shutdown()


async def test_in_hand_counts_the_jobs_given_and_not_yet_through() -> None:
    worker = SerialThread("test-serial")
    gate = threading.Event()
    ran: list[str] = []
    try:
        blocking = asyncio.ensure_future(worker.run(gate.wait))
        await asyncio.sleep(0)  # given first
        worker.submit(lambda: ran.append("submitted"))
        await asyncio.sleep(0.01)
        assert worker.in_hand == 2
        gate.set()
        await blocking
        assert await worker.run(lambda: list(ran)) == ["submitted"]
        assert worker.in_hand == 0
    finally:
        gate.set()
        worker.shutdown()


async def test_drained_is_done_once_every_job_in_hand_is_through() -> None:
    worker = SerialThread("test-serial")
    gate = threading.Event()
    try:
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
    finally:
        gate.set()
        worker.shutdown()
