"""Graceful shutdown of ``skilldesk serve``: what the process does when told to stop.

On SIGTERM (or Ctrl-C) the service at once takes no new runs (503 ``shutting_down``;
``/readyz`` says not ready) and, with Redis, ends every open run stream with a ``reconnect``
event (the run's stream URL and ``Last-Event-ID``: another process serves the rest from
Redis). uvicorn stops listening and waits for the open responses; runs under way then get
``SKILLDESK_SHUTDOWN_GRACE_S`` to finish, counted from the signal. Those still going are
stopped: their leases are released and every other process is told (over Redis) to resume
them from their last checkpoint at once. A workflow run driven by a request that uvicorn cuts
off at the end of the grace is let go the same way, before the store closes, and the request
answers 503 ``shutting_down`` naming the run (``app.api.errors.handed_over``); a streamed one
is let go by its response at the grace's end, whose last event, ``handed_over``, names it
(``app.api.sse.Cutoffs``).

Told to stop while it still starts (waiting for PostgreSQL's schema set-up lock, say), the
process stops its start-up at once: what it opened is closed, it logs
``service.stopped_while_starting`` and ends as any stop does, never serving.
"""

from __future__ import annotations

import asyncio
import signal
import socket
import sys
from types import FrameType
from typing import Any

import structlog
import uvicorn
from uvicorn.lifespan.on import LifespanOn

log = structlog.get_logger(__name__)


class StoppingServer(uvicorn.Server):
    """uvicorn that tells the service as soon as a signal asks it to stop."""

    stop_signal: int | None = None  # the first signal that asked

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        """Start as uvicorn does, unless a signal stops the start-up (then serve nothing)."""
        if isinstance(self.lifespan, LifespanOn):
            self.lifespan = StoppableLifespan(self.config)
        try:
            if self.should_exit:  # a signal before the app's start-up began
                raise StoppedWhileStarting
            await super().startup(sockets)
        except StoppedWhileStarting:
            name = signal.Signals(self.stop_signal).name if self.stop_signal else None
            log.info("service.stopped_while_starting", signal=name)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        """Drain the service (see the module's description), then stop as uvicorn does."""
        if self.stop_signal is None:
            self.stop_signal = sig
        if isinstance(self.lifespan, StoppableLifespan):
            self.lifespan.stop_starting()
        drain = getattr(getattr(self.config.app, "state", None), "drain", None)
        if drain is not None:
            drain()
        super().handle_exit(sig, frame)


class StoppedWhileStarting(Exception):
    """A signal stopped the app's start-up; nothing is served."""


class StoppableLifespan(LifespanOn):
    """uvicorn's lifespan, whose start-up a signal cancels: uvicorn itself only notes the
    signal and waits for the start-up to end, which may take minutes (a PostgreSQL schema
    lock another process holds is waited for up to 120 s)."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.stopped = False  # the start-up ended, cancelled by a stop
        self._stop = False  # a stop was asked
        self._cancelled = False  # the start-up was cancelled (once: its clean-up runs)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._app: asyncio.Task[None] | None = None

    async def startup(self) -> None:
        """uvicorn's ``LifespanOn.startup`` (0.55), but for a start-up a stop cancelled.

        Raises:
            StoppedWhileStarting: a signal stopped it; what it had opened is closed.
        """
        self.logger.info("Waiting for application startup.")
        self._loop = asyncio.get_running_loop()
        self._app = self._loop.create_task(self.main())
        self._app.add_done_callback(self._ended)
        if self._stop:  # asked before the loop was known
            self._cancel()
        await self.receive_queue.put({"type": "lifespan.startup"})
        await self.startup_event.wait()
        if self.stopped:
            raise StoppedWhileStarting
        if self.startup_failed or (self.error_occurred and self.config.lifespan == "on"):
            self.logger.error("Application startup failed. Exiting.")
            self.should_exit = True
        else:
            self.logger.info("Application startup complete.")

    def stop_starting(self) -> None:
        """Cancel the app's start-up if it is under way (safe from a signal handler)."""
        self._stop = True
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._cancel)

    def _cancel(self) -> None:
        if self._cancelled or self._app is None or self.startup_event.is_set():
            return
        self._cancelled = True
        self._app.cancel()  # unwinds the app's start-up (``open_services``) as it goes

    def _ended(self, task: asyncio.Task[None]) -> None:
        if task.cancelled():  # before it began: the app opened nothing
            self.stopped = True
        self.startup_event.set()
        self.shutdown_event.set()

    async def send(self, message: Any) -> None:
        """Pass the app's messages on, but the failure its start-up's cancellation by a stop
        reports (with a traceback): that is no failure."""
        cancelled = isinstance(sys.exc_info()[1], asyncio.CancelledError)
        if message["type"] == "lifespan.startup.failed" and self._cancelled and cancelled:
            self.stopped = True
            self.startup_failed = True  # uvicorn's main() then ends quietly
            self.startup_event.set()
            return
        await super().send(message)
