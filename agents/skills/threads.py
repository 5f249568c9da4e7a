"""Where sync handlers run: daemon threads of their own, awaited from the event loop."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import os
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from agents.errors import HandlerExit, HandlersBusy

_MAX_HANDLER_THREADS = 64


class HandlerThreads:
    """Runs sync handlers (and imports) on daemon threads of their own, awaited.

    Not the event loop's shared pool: a handler that outlives its timeout keeps its thread
    (Python cannot stop one), and in a shared pool a few hung handlers would queue every
    other request behind them, nor would the process exit while they hang. At most
    ``limit`` calls run at once; past that a call fails as busy instead of queueing. A
    thread whose call returned waits ``idle_s`` for the next one (starting a thread costs
    the event loop more than the call of a small handler), so a handler may find its
    thread-local state again, but must not rely on it.
    """

    def __init__(self, limit: int = _MAX_HANDLER_THREADS, idle_s: float = 60.0) -> None:
        self.limit = limit
        self.idle_s = idle_s
        self.running = 0  # calls under way, hung ones included
        self._by_skill: dict[str, int] = {}  # the same, per skill
        self._count = threading.Lock()
        self._idle: list[queue.SimpleQueue[_Job]] = []  # the inboxes of waiting threads
        self._pid = os.getpid()

    async def run(self, function: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """``function(*args, **kwargs)`` on a handler thread; raises HandlersBusy at the limit."""
        return await self.run_for("", 0, function, *args, **kwargs)

    async def run_for(
        self, skill: str, quota: int, function: Callable[..., Any], /, *args: Any, **kwargs: Any
    ) -> Any:
        """The same for a call of ``skill``, which may have ``quota`` calls running at once
        (hung ones included; 0: no quota of its own), so its hung handlers cannot take the
        threads other skills need."""
        with self._count:
            if self._pid != os.getpid():  # a forked child has none of the parent's threads
                self._pid, self._idle, self.running = os.getpid(), [], 0
                self._by_skill = {}
            if self.running >= self.limit:
                raise HandlersBusy(
                    f"{self.running} handler calls are still running (hung ones included); "
                    "try again later"
                )
            if quota and self._by_skill.get(skill, 0) >= quota:
                raise HandlersBusy(
                    f"skill {skill!r} already runs {quota} calls, its limit (hung ones "
                    "included); try again shortly"
                )
            self.running += 1
            self._by_skill[skill] = self._by_skill.get(skill, 0) + 1
            inbox = self._idle.pop() if self._idle else None
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        call = partial(contextvars.copy_context().run, function, *args, **kwargs)
        job = _Job(call, loop, future, skill)
        if inbox is None:
            inbox = queue.SimpleQueue()
            inbox.put(job)
            threading.Thread(
                target=self._serve, args=(inbox,), name="skilldesk-tool", daemon=True
            ).start()
        else:
            inbox.put(job)
        return await future

    def _serve(self, inbox: queue.SimpleQueue[_Job]) -> None:
        while True:
            try:
                job = inbox.get(timeout=self.idle_s)
            except queue.Empty:
                with self._count:
                    if inbox in self._idle:
                        self._idle.remove(inbox)
                        return
                job = inbox.get()  # taken for a call just now: it is on its way
            result, error = None, None
            try:
                result = job.call()
            except BaseException as exc:  # SystemExit from a handler included
                error = _as_error(exc)
            with self._count:  # free before the caller hears back, so its next call reuses it
                self.running -= 1
                self._by_skill[job.skill] -= 1
                if not self._by_skill[job.skill]:
                    del self._by_skill[job.skill]
                self._idle.append(inbox)
            with contextlib.suppress(RuntimeError):  # the loop closed while it hung
                job.loop.call_soon_threadsafe(_settle, job.future, result, error)


@dataclass(frozen=True)
class _Job:
    call: Callable[[], Any]
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[Any]
    skill: str


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.done():  # timed out meanwhile
        return
    if error is None:
        future.set_result(result)
    else:
        future.set_exception(error)


def _as_error(exc: BaseException) -> BaseException:
    # Anything but a plain Exception (SystemExit, CancelledError...) would stop more than the
    # call; a StopIteration cannot be set on a future at all.
    if not isinstance(exc, Exception) or isinstance(exc, StopIteration | StopAsyncIteration):
        return HandlerExit(f"the handler raised {type(exc).__name__}({exc})")
    return exc
