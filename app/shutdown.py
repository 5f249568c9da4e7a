"""Graceful shutdown of ``skilldesk serve``: what the process does when told to stop.

On SIGTERM (or Ctrl-C) the service at once takes no new runs (503 ``shutting_down``;
``/readyz`` says not ready) and, with Redis, ends every open run stream with a ``reconnect``
event (the run's stream URL and ``Last-Event-ID``: another process serves the rest from
Redis). uvicorn stops listening and waits for the open responses; runs under way then get
``SKILLDESK_SHUTDOWN_GRACE_S`` to finish, counted from the signal. Those still going are
stopped: their leases are released and every other process is told (over Redis) to resume
them from their last checkpoint at once. A workflow run driven by a request that uvicorn cuts
off at the end of the grace is let go the same way, before the store closes, and the request
answers 503 ``shutting_down`` naming the run (``app.api.routes.workflows.handed_over``).
"""

from __future__ import annotations

from types import FrameType

import uvicorn


class StoppingServer(uvicorn.Server):
    """uvicorn that tells the service as soon as a signal asks it to stop."""

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        """Drain the service (see the module's description), then stop as uvicorn does."""
        drain = getattr(getattr(self.config.app, "state", None), "drain", None)
        if drain is not None:
            drain()
        super().handle_exit(sig, frame)
