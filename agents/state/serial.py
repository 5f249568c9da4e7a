"""A thread that runs a store's jobs one after another for the event loop."""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable
from contextlib import suppress
from typing import Any, TypeVar

T = TypeVar("T")


class SerialThread:
    """One thread that runs functions in the order they are given, each result handed back
    to the coroutine awaiting it.

    What ``run_in_executor`` on a one-thread pool does, without its two futures a job (a
    ``concurrent.futures`` one, with its lock and condition, chained to the asyncio one) and
    the pool's bookkeeping. A job whose caller was cancelled still runs (a write is not
    half-done), its result dropped. ``in_hand`` counts the jobs given and not yet through
    (read and changed on the event loop only).
    """

    def __init__(self, name: str) -> None:
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], Any, Any] | None] = (
            queue.SimpleQueue()
        )
        self.in_hand = 0
        self._drained: list[asyncio.Future[None]] = []  # told when in_hand is back to 0
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    async def run(self, function: Callable[[], T]) -> T:
        """``function()`` on the thread, after the jobs given before it."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self.in_hand += 1
        self._jobs.put((function, loop, future))
        return await future

    def submit(self, function: Callable[[], Any]) -> None:
        """``function()`` on the thread, after the jobs given before it; nobody waits for it
        (it reports its own errors)."""
        self.in_hand += 1
        self._jobs.put((function, asyncio.get_running_loop(), None))

    def drained(self) -> asyncio.Future[None]:
        """Done once no job is in hand (at once if none is)."""
        future = asyncio.get_running_loop().create_future()
        if self.in_hand:
            self._drained.append(future)
        else:
            future.set_result(None)
        return future

    def shutdown(self) -> None:
        """Run the jobs given so far, then end the thread."""
        self._jobs.put(None)
        self._thread.join()

    def _serve(self) -> None:
        while (job := self._jobs.get()) is not None:
            function, loop, future = job
            result, error = None, None
            try:
                result = function()
            except Exception as exc:  # handed to the caller, as an executor does
                error = exc
            except BaseException as exc:  # the thread goes on serving the jobs after it
                error = RuntimeError(f"the store's thread was interrupted: {exc!r}")
            with suppress(RuntimeError):  # a closed loop: nobody awaits it any more
                loop.call_soon_threadsafe(self._settle, future, result, error)

    def _settle(
        self, future: asyncio.Future[Any] | None, result: Any, error: BaseException | None
    ) -> None:
        self.in_hand -= 1
        if not self.in_hand:
            waiting, self._drained = self._drained, []
            for drained in waiting:
                if not drained.done():
                    drained.set_result(None)
        if future is None or future.done():  # submitted, or its caller was cancelled
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)
