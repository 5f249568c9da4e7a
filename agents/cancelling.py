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


async def stop_tasks(
    tasks: Iterable[asyncio.Future[Any] | None], *, within_s: float | None = None
) -> set[asyncio.Future[Any]]:
    """Cancel ``tasks`` and wait until each has ended, cancelling again any that go on (it
    dropped the cancel), for ``within_s`` at most (None: for as long as it takes). Returns
    those still going then. What they raised is retrieved, not raised here."""
    stopping = [task for task in tasks if task is not None]
    pending = {task for task in stopping if not task.done()}
    loop = asyncio.get_running_loop()
    deadline = None if within_s is None else loop.time() + within_s
    while pending:
        for task in pending:
            task.cancel()
        wait = AGAIN_S if deadline is None else min(AGAIN_S, deadline - loop.time())
        if wait <= 0:
            break
        _, pending = await asyncio.wait(pending, timeout=wait)
    for task in stopping:
        if task.done() and not task.cancelled():
            task.exception()  # retrieved: asyncio does not log it as never retrieved
    return pending
