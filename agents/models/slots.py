"""A profile's ``max_connections`` as slots: a call holds one while it is open to the server.

The wait for a free slot is the service's own queue, not the model server's time. So the
gateway takes a slot before an attempt's timeout starts and hands it to the transport
(``Transport.acreate(request, slot)``): a call that waited behind others is not cut off, and
retried, as if the server were slow. The transports' connection pools are capped at the
same number and each slot is given back only after its connection, so a pool never makes a
held call wait.

The wait has no bound of its own: every holder's time is bounded (an attempt's timeout, a
stream's ``timeout_s`` of silence and ``stream_limit_s`` in all), and a call cancelled while
it waits (its run cancelled) stops waiting, having taken nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Callable, Iterator


class Slot:
    """One held slot, given back once: when the call ends, or when the stream it was handed
    to (``keep``) is closed."""

    def __init__(self, give_back: Callable[[], None]) -> None:
        self._give_back: Callable[[], None] | None = give_back
        self.kept = False

    def keep(self) -> Callable[[], None]:
        """Hand the slot to a stream: the call's end no longer gives it back; the returned
        function does (call it once the stream's connection is released)."""
        self.kept = True
        return self.release

    def release(self) -> None:
        """Give the slot back (again: nothing)."""
        give_back, self._give_back = self._give_back, None
        if give_back is not None:
            give_back()


class Slots:
    """``limit`` calls at once: one count for async calls (per event loop), one for blocking
    calls (across threads)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._async: tuple[asyncio.AbstractEventLoop, asyncio.Semaphore] | None = None
        self._blocking = threading.BoundedSemaphore(limit)

    @contextlib.asynccontextmanager
    async def held(self) -> AsyncIterator[Slot]:
        """Wait for a free slot and hold it for the block (or until a stream that ``keep``s
        it is closed)."""
        free = self._semaphore()
        await free.acquire()  # cancelled here: nothing was taken, nothing is given back
        slot = Slot(free.release)
        try:
            yield slot
        finally:
            if not slot.kept:
                slot.release()

    @contextlib.contextmanager
    def held_blocking(self) -> Iterator[Slot]:
        """Blocking :meth:`held`."""
        self._blocking.acquire()
        slot = Slot(self._blocking.release)
        try:
            yield slot
        finally:
            if not slot.kept:
                slot.release()

    def _semaphore(self) -> asyncio.Semaphore:
        # A semaphore belongs to the loop it was first awaited on (tests and CLI commands may
        # run several loops in one process).
        loop = asyncio.get_running_loop()
        if self._async is None or self._async[0] is not loop:
            self._async = (loop, asyncio.Semaphore(self.limit))
        return self._async[1]
