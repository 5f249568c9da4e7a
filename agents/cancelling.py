"""Stopping tasks for good.

``task.cancel()`` then waiting for the task is not enough on Python 3.11: ``asyncio.wait_for``
(psycopg's pool waits for a connection with it) returns its result and drops a cancel that
lands as the result comes, and a task looping on such calls goes on as if never cancelled
while its canceller waits for good (a thread's lease renewal did, holding its thread).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

AGAIN_S = 0.5  # a task still going this long after a cancel is cancelled again


async def stop_tasks(tasks: Iterable[asyncio.Future[Any] | None]) -> None:
    """Cancel ``tasks`` and wait until each has ended, cancelling again any that go on (it
    dropped the cancel). What they raised is retrieved, not raised here."""
    stopping = [task for task in tasks if task is not None]
    pending = {task for task in stopping if not task.done()}
    while pending:
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=AGAIN_S)
    for task in stopping:
        if not task.cancelled():
            task.exception()  # retrieved: asyncio does not log it as never retrieved
