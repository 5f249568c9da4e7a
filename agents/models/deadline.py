"""A streamed reply's deadlines: the wait for each next chunk, and the whole reply.

A reply that stalls (a server that keeps the connection open with keep-alive comments but
sends nothing) or never ends (tokens forever) would otherwise hold its run, and its thread,
for as long as the connection lives: a socket's read timeout never fires while bytes
arrive, and a run stops only between its steps.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any


class StreamDeadline:
    """Bounds the waits for a stream's chunks: ``idle_s`` seconds of silence, or ``total_s``
    since it was made, ends the wait with TimeoutError (``why`` says which).

    One timer per silence, not one per chunk (a timeout context per chunk costs ~3 µs, a
    millisecond a long reply); only the wait for a chunk is cut, never the code that reads
    it between waits. Call ``close`` when the stream ends.
    """

    def __init__(self, idle_s: float, total_s: float) -> None:
        self._loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None, "a stream is read in a task"
        self._task = task
        self.idle_s = idle_s
        self.total_s = total_s
        self._ends = self._loop.time() + total_s
        self._since: float | None = None  # when the wait under way began
        self._fired = False
        self.why = ""
        self._timer = self._loop.call_at(min(self._loop.time() + idle_s, self._ends), self._check)

    async def next(self, chunks: AsyncIterator[Any]) -> Any:
        """The stream's next chunk (StopAsyncIteration at its end).

        Raises:
            TimeoutError: the chunk did not come in time (``why`` says which limit).
        """
        now = self._loop.time()
        if now >= self._ends:
            self._late("total")
        self._since = now
        try:
            return await anext(chunks)
        except asyncio.CancelledError:
            if self._fired and self._task.uncancel() == 0:  # this deadline's, nobody else's
                raise TimeoutError(self.why) from None
            raise
        finally:
            self._since = None

    def close(self) -> None:
        """Stop the timer."""
        self._timer.cancel()

    def _check(self) -> None:
        now, since = self._loop.time(), self._since
        if since is not None and (now >= self._ends or now - since >= self.idle_s):
            self._fired = True
            self.why = self._reason("total" if now >= self._ends else "idle")
            self._task.cancel()
            return
        if since is None and now >= self._ends:
            return  # past the limit and not waiting: the next wait ends at once (``next``)
        due = (since if since is not None else now) + self.idle_s
        self._timer = self._loop.call_at(min(due, self._ends), self._check)

    def _late(self, which: str) -> None:
        self.why = self._reason(which)
        raise TimeoutError(self.why)

    def _reason(self, which: str) -> str:
        if which == "total":
            return f"the reply went on past {self.total_s:g} s (the profile's stream_limit_s)"
        return f"the reply stopped for {self.idle_s:g} s mid-way (the profile's timeout_s)"
