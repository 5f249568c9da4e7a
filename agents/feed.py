"""A run's events for every reader: the request that started the run and any that join it.

The run is driven by a task of its own, not by its first reader: a reader that goes away
(a client that disconnects or times out) does not stop the run, and a reader that comes
later (the same message sent again while it is answered) reads every event from the first.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

from agents import metrics
from agents.events import Event


class RunFeed:
    """The events of one run so far, and the end of it.

    Args:
        fingerprint: What the run answers (the new user message), to match a duplicate.
        key: The client's idempotency key for the request, if it sent one.
    """

    def __init__(self, fingerprint: str, key: str | None = None) -> None:
        self.fingerprint = fingerprint
        self.key = key
        self.events: list[Event] = []
        self.error: BaseException | None = None
        self.done = False
        self.ended_at = 0.0
        self._waiters: list[asyncio.Future[None]] = []
        metrics.RUNS_ACTIVE.inc()

    def matches(self, fingerprint: str, key: str | None) -> bool:
        """Whether a request for ``fingerprint`` (with ``key``) asks for this same run."""
        if key is not None or self.key is not None:
            return key == self.key
        return fingerprint == self.fingerprint

    def put(self, event: Event) -> None:
        """Add an event; readers waiting for one wake up."""
        self.events.append(event)
        self._wake()

    def close(self, error: BaseException | None = None) -> None:
        """End the feed; ``error`` is raised to readers once they have read every event."""
        if not self.done:
            metrics.RUNS_ACTIVE.dec()
        self.error, self.done, self.ended_at = error, True, time.monotonic()
        self._wake()

    async def read(self) -> AsyncIterator[Event]:
        """Every event from the first, then each as it comes, to the end."""
        seen = 0
        while True:
            while seen < len(self.events):
                seen += 1
                yield self.events[seen - 1]
            if self.done:
                if self.error is not None:
                    raise self.error
                return
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            await waiter

    def _wake(self) -> None:
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._waiters.clear()


def fingerprint(content: Any) -> str:
    """A message's content as a comparable string."""
    return content if isinstance(content, str) else json.dumps(content, sort_keys=True)
