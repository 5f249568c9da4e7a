"""Side-effecting calls made once per key, whatever crashes, retries and processes: each is
claimed in the call journal (``agents/state/calls.py``) before its handler runs.

The call that claims a key makes it and beats (``CallJournal.touch``) while it runs; another
with the key (here: after it, in turn; elsewhere: a retry that reached another process, or a
stopped run resumed while the call it stopped goes on) waits while that one is heard of, then
gets its recorded answer, or takes over a call that failed or went silent (its process died,
or its beats were lost). A claim taken over is fenced: its late beats and end write nothing
over the claim that took it (the caller still gets its own result). A run that stops mid-call
does not cut the side effect off half-way: the call runs to its end.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from typing import Any

import structlog

from agents.skills.results import ToolResult, tool_error
from agents.state.calls import CallJournal, CallRecord, Claim, MemoryCallJournal

log = structlog.get_logger(__name__)
_SETTLE_POLL_S = 0.2  # how often a call waits on another one with its key
_BEAT_S = 2.0  # how often a call under way says so in the journal
_SILENT_S = 3 * _BEAT_S  # a call not heard of for this long was cut off (its process died)
_FINISH_S = 10.0  # how long closing waits for calls under way


@dataclass(frozen=True)
class KeyedCall:
    """One side-effecting call: its key, what it asks, and for whom."""

    key: str
    tool: str
    args: dict[str, Any]
    thread_id: str | None
    run_id: str | None
    bound: bool  # a caller's own key: bound to what it first asked (a run's keys hold it)

    @property
    def request(self) -> str:
        """What the call asks, as the journal keeps it: the tool and its arguments' hash."""
        arguments = json.dumps(self.args, sort_keys=True, default=str)
        return f"{self.tool}:{hashlib.sha256(arguments.encode()).hexdigest()[:32]}"


class OnceCalls:
    """Makes side-effecting calls once per key through the journal (the service puts it
    beside its checkpoints; in memory until then)."""

    def __init__(self) -> None:
        self.journal: CallJournal = MemoryCallJournal()
        self._keyed: dict[str, tuple[asyncio.Lock, int]] = {}  # key -> its lock, its callers
        self._finishing: set[asyncio.Future[ToolResult]] = set()  # calls under way
        self._failures: dict[str, ToolResult] = {}  # a failed call's, for those that waited

    async def call(
        self, call: KeyedCall, make: Callable[[], Awaitable[ToolResult]], started: float
    ) -> ToolResult:
        """``make()``'s result, made once for ``call.key`` (or the result recorded for it)."""
        # A caller that stops waiting (a cancelled run) does not stop the call: shielded.
        task = asyncio.ensure_future(self._once(call, make, started))
        self._finishing.add(task)
        task.add_done_callback(self._finished)
        return await asyncio.shield(task)

    async def aclose(self) -> None:
        """Wait for the calls under way (at most ``_FINISH_S``: one cut off then is made
        again, with its key, by its retry)."""
        if self._finishing:
            await asyncio.wait(self._finishing, timeout=_FINISH_S)

    def _finished(self, task: asyncio.Future[ToolResult]) -> None:
        """A call ended; its error, if it raised, is logged: its caller may have stopped
        waiting for it, and then nobody else reads it."""
        self._finishing.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("tool.journal_failed", error=repr(task.exception()))

    async def _once(
        self, call: KeyedCall, make: Callable[[], Awaitable[ToolResult]], started: float
    ) -> ToolResult:
        key, tool = call.key, call.tool
        # Only a caller's own key is bound to its request; a run's key names its call already
        # (a workflow node's, whatever its arguments render to when it is resumed).
        request = call.request if call.bound else None
        async with self._one_at_a_time(key) as waited:
            failure = self._failures.get(key)
            if waited and failure is not None:  # sent together with a call that failed
                return replace(failure, ms=(time.perf_counter() - started) * 1000)
            settled = False
            while True:
                if settled:  # waited for a call elsewhere: one that failed answers this too
                    found = await self.journal.get(key)
                    if _failed_asking(found, request):
                        assert found is not None
                        return _replayed(tool, found, started)
                earlier = await self.journal.begin(
                    key,
                    thread_id=call.thread_id,
                    run_id=call.run_id,
                    tool=tool,
                    request=request,
                    silent_s=_SILENT_S,
                )
                if isinstance(earlier, Claim):
                    claim = earlier  # this call makes it
                    break
                if request is not None and earlier.request not in (None, request):
                    why = (
                        f"the idempotency key came before with another call (another tool or "
                        f"other arguments); send {tool} with a new key"
                    )
                    return tool_error(tool, "idempotency_key_reused", why, started)
                if earlier.status == "done" and earlier.content is not None:
                    log.info("tool.replayed", tool=tool, key=key)
                    return _replayed(tool, earlier, started)
                if earlier.status != "started":  # failed, asking another request: not this one
                    why = f"the key of this {tool} call belongs to another call"
                    return tool_error(tool, "idempotency_key_reused", why, started)
                await self._settled(key)  # under way elsewhere: its end, or its silence
                settled = True
            made = asyncio.Event()
            beat = asyncio.create_task(self._beat(claim, tool, made))
            try:
                result = await make()
            finally:
                made.set()  # as well as the cancel, which a beat's store call may drop
                beat.cancel()
            if result.ok:
                await _recorded(lambda: self.journal.finish(claim, result.content, True), call)
            else:  # the calls waiting here share it; a later retry makes it again
                self._failures[key] = result
                await _recorded(lambda: self.journal.fail(claim, result.content), call)
            return result

    async def _beat(self, claim: Claim, tool: str, made: asyncio.Event) -> None:
        """Tell the journal, every ``_BEAT_S``, that the call ``claim`` makes is under way
        until it is ``made``; stop once another caller has taken it over. (Ended by ``made``,
        not only by a cancel: Python 3.11's ``asyncio.wait_for``, in psycopg's pool, drops a
        cancel that lands as its result comes, and the beats went on for good.)"""
        while not made.is_set():
            await asyncio.sleep(_BEAT_S)
            if made.is_set():
                return
            try:
                alive = await self.journal.touch(claim)
            except Exception as exc:  # a missed beat at worst lets a retry take it over
                log.warning("tool.journal_beat_failed", key=claim.key, error=str(exc))
                continue
            if not alive:  # silent too long (beats lost): the call is being made again
                log.error("tool.journal_claim_taken_over", tool=tool, key=claim.key)
                return

    @asynccontextmanager
    async def _one_at_a_time(self, key: str) -> AsyncIterator[bool]:
        """Calls with one key in this process take turns: the second finds the first's
        result recorded, instead of running the handler beside it. Yields whether this one
        waited for another."""
        lock, users = self._keyed.get(key, (asyncio.Lock(), 0))
        self._keyed[key] = (lock, users + 1)
        try:
            waited = lock.locked()
            async with lock:
                yield waited
        finally:
            lock, users = self._keyed[key]
            if users == 1:
                del self._keyed[key]
                self._failures.pop(key, None)  # shared by the calls sent with it, no later
            else:
                self._keyed[key] = (lock, users - 1)

    async def _settled(self, key: str) -> None:
        """Wait while another call with ``key`` is under way and heard of: its beats change
        its record. Silence is timed on this process's clock, never against the journal's
        times (the journal decides the take-over on its own clock)."""
        heard: tuple[str | None, float] | None = None
        since = time.monotonic()
        while True:
            await asyncio.sleep(_SETTLE_POLL_S)
            found = await self.journal.get(key)
            if found is None or found.status != "started":
                return
            if (found.owner, found.updated) != heard:
                heard, since = (found.owner, found.updated), time.monotonic()
            elif time.monotonic() - since > _SILENT_S:
                return


async def _recorded(write: Callable[[], Awaitable[bool]], call: KeyedCall) -> None:
    """A call's end written to the journal, tried three times: a side effect is done by
    now, and an end not recorded lets a retry make it again once the call goes silent. An
    end whose claim was taken over is not written: the claim that took it stands."""
    for attempt in range(3):
        try:
            if not await write():
                log.error("tool.journal_lost_claim", tool=call.tool, key=call.key)
            return
        except Exception as exc:
            log.warning("tool.journal_write_failed", key=call.key, attempt=attempt, error=str(exc))
            await asyncio.sleep(0.2 * (attempt + 1))
    log.error("tool.journal_write_lost", key=call.key)


def _failed_asking(record: CallRecord | None, request: str | None) -> bool:
    """Whether ``record`` is a call that failed, asking ``request`` (or not saying)."""
    return (
        record is not None
        and record.status == "failed"
        and bool(record.content)
        and (request is None or record.request in (None, request))
    )


def _replayed(tool: str, record: CallRecord, started: float) -> ToolResult:
    """A recorded call's result, as the call gave it (its data: its JSON, or the text; a
    failure's code from its ``error (<code>): ...`` text)."""
    content = record.content or ""
    ms = (time.perf_counter() - started) * 1000
    if record.status == "failed":
        code = re.match(r"error \(([\w.-]+)\)", content)
        return ToolResult(tool, False, content, None, code[1] if code else "tool_failed", False, ms)
    try:
        data: Any = json.loads(content)
    except ValueError:
        data = content
    return ToolResult(tool, bool(record.ok), content, data, None, False, ms)
