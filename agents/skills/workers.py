"""Handlers out of the service's process: a pool of worker processes per skill.

A worker (``agents/skills/worker.py``) serves one skill: it imports the skill's module on
the first call (the third tier stays lazy) and keeps it. A call that outlives its timeout
kills its worker, and the next call starts a fresh one; a worker has a memory limit, a CPU
limit per call, and dies with the service. Each skill may use ``concurrency`` workers at once,
so one skill's load cannot take the workers another skill needs.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import os
import signal
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from agents.errors import HandlerCrashed, HandlerFailed, HandlerImportFailed, HandlersBusy
from agents.skills.cgroups import ENV as CGROUP_ENV
from agents.skills.cgroups import WorkerGroups
from agents.skills.context import ToolContext
from agents.skills.loader import Skill
from agents.skills.output import relay_output
from agents.skills.spec import ToolSpec
from agents.skills.trimming import Trimmed, has_files
from agents.skills.worker import REPLY_MARK, frame, kill_below

log = structlog.get_logger(__name__)
_HEADER_SIZE = 8  # worker.REPLY_MARK (4 bytes), then the length (4 bytes)
# A reply's length at most: a longer one is not read (the worker is stopped and the call
# fails), so one result cannot take the service's memory. Replies are parsed on a thread
# above _PARSE_ON_LOOP bytes, so a large one does not hold the event loop.
MAX_REPLY_BYTES = 16 * 2**20
_PARSE_ON_LOOP = 256 * 2**10


async def _parsed(data: bytes | str) -> Any:
    """JSON text as data (ValueError when it is not JSON)."""
    if len(data) <= _PARSE_ON_LOOP:
        return json.loads(data)
    return await asyncio.to_thread(json.loads, data)


class HandlerRaised(HandlerFailed):
    """What a handler raised in its worker, in the service's words (``worker.describe``),
    and ``raised``, the name of its class."""

    def __init__(self, message: str, raised: str) -> None:
        super().__init__(message)
        self.raised = raised


@dataclass(frozen=True)
class WorkerCall:
    """One handler call, as a worker receives it (``limits``: the tool's result limits as
    plain data, ``ResultLimits.model_dump()``; the worker trims the value to them)."""

    module: str
    function: str
    arguments: dict[str, Any]
    context: ToolContext | None
    timeout_s: float
    import_timeout_s: float
    limits: dict[str, Any]


_EXIT_WAIT_S = 2.0  # the longest wait for a worker's exit status, and for its last output
_EXIT_POLL_S = 0.25  # how often a call waiting for its reply looks whether the worker ended


def kill_tree(pid: int) -> None:
    """Kill ``pid`` and every process below it, ``pid`` stopped first (``kill_below``)."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGSTOP)
    kill_below(pid)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


class Worker:
    """One worker process bound to one version of one skill."""

    def __init__(
        self, skill: Skill, process: asyncio.subprocess.Process, group: Path | None = None
    ) -> None:
        self.skill = skill.name
        self.fingerprint = skill.fingerprint
        self.process = process
        self.group = group  # its cgroup (``cgroups.py``), where the service may make one
        self.imported: set[str] = set()
        self.idle_since = time.monotonic()
        self.killed = False
        self._calls = 0
        # The log context (request, user, thread ids) of each call not yet ended in its output:
        # what the handlers print during a call is logged with it (``relay_output``).
        self._ids: dict[int, Mapping[str, Any]] = {}
        self._output: asyncio.Task[None] | None = None  # relays what the handlers print
        self._watch: asyncio.Task[None] | None = None  # tells its end to its reply stream

    @classmethod
    async def start(cls, skill: Skill, package: str, groups: WorkerGroups | None = None) -> Worker:
        """Start a worker and bind it to ``skill``; in a cgroup of its own made in ``groups``."""
        group = groups.make() if groups is not None else None
        try:
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "agents.skills.worker",
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=None if group is None else {**os.environ, CGROUP_ENV: str(group)},
            )
        except BaseException:
            if group is not None:
                await WorkerGroups.remove(group)
            raise
        worker = cls(skill, process, group)
        assert process.stderr is not None
        # In a context of its own: the worker outlives the request that started it.
        relay = relay_output(process.stderr, skill.name, process.pid, worker._ids)
        worker._output = asyncio.create_task(relay, context=contextvars.Context())
        worker._watch = asyncio.create_task(worker._watch_exit())
        config = skill.config
        worker._send(("bind", skill.name, package, str(skill.path), config.memory_mb, skill.code))
        return worker

    @property
    def alive(self) -> bool:
        """Whether the process runs and can take a call."""
        return not self.killed and self.process.returncode is None

    async def call(self, call: WorkerCall, on_import: Any) -> Any:
        """The handler's value trimmed by the worker (``Trimmed``), or as it is when it has
        files for the service to adopt first (``has_files``); raises what went wrong as a
        Skilldesk error.

        Raises:
            TimeoutError: the call (or the import) outlived its limit; the worker is killed.
            HandlerImportFailed, HandlerFailed, HandlerCrashed: as their names say.
        """
        self._calls += 1
        number = self._calls
        self._ids[number] = structlog.contextvars.get_contextvars()
        cpu_s = call.timeout_s + (0 if call.module in self.imported else call.import_timeout_s)
        message = ("call", number, call.module, call.function, call.arguments, call.context)
        self._send((*message, cpu_s, call.limits))
        assert self.process.stdin is not None
        await self.process.stdin.drain()
        if call.module not in self.imported:
            try:
                reply = await self._receive(call.import_timeout_s)
            except TimeoutError:
                limit = f"{call.import_timeout_s:g} s"
                raise HandlerImportFailed(f"it did not load within {limit}") from None
            match reply:
                case ["imported", str() as module, str() | None as error] if module == call.module:
                    pass
                case _:
                    raise self._broken(reply)
            if error is not None:
                raise HandlerImportFailed(error)
            self.imported.add(call.module)
            on_import(call.module)
        return await self._result(await self._receive(call.timeout_s), number)

    async def _result(self, reply: Any, number: int) -> Any:
        """What the reply to call ``number`` says, checked against the shapes the worker
        sends (anything else stops it)."""
        match reply:
            case ["result", int() as got, bool() as ok, str() as kind, payload] if (
                got == number and not isinstance(got, bool)
            ):
                pass
            case _:
                raise self._broken(reply)
        match ok, kind, payload:
            case True, "trimmed", [str() as content, data, bool() as truncated]:
                return Trimmed(content, data, truncated)
            case True, "json", str():
                with contextlib.suppress(ValueError):  # not JSON: broken, as below
                    value = await _parsed(payload)
                    if has_files(value):  # only such a value comes whole, to be adopted first
                        return value
            case False, "raised", [str() as raised, str() as said]:
                raise HandlerRaised(said, raised)
            case False, "not_json", str():
                raise HandlerFailed(f"returned data that is not JSON: {payload}")
            case False, _, str():
                raise HandlerFailed(payload)
        raise self._broken(reply)

    def kill(self, why: str | None = None) -> None:
        """Stop the process now (a hung or spinning handler cannot be asked), and every
        process its handlers started that still runs; ``why`` (a call's failure, not a stop
        of a worker no longer needed) is logged."""
        if self.alive:
            self.killed = True
            kill_tree(self.process.pid)
            if why is not None:
                log.warning("skill.worker_killed", skill=self.skill, pid=self.process.pid, why=why)
        if self.group is not None:  # dead or not: what left its tree is still in it
            WorkerGroups.kill(self.group)

    async def close(self) -> None:
        """End the process and wait for it (its output relayed to the end, for a while)."""
        self.kill()
        await self._exit_code()
        if self.group is not None:
            await WorkerGroups.remove(self.group)
        if self._output is not None:
            with contextlib.suppress(TimeoutError):  # a process it left holds the pipe
                await asyncio.wait_for(asyncio.shield(self._output), _EXIT_WAIT_S)
            self._output.cancel()
        if self._watch is not None:
            self._watch.cancel()
        # Our ends of its pipes: asyncio closes them only once every holder has (a process
        # its handler left may live on), and has no public way to close them before.
        transport = getattr(self.process, "_transport", None)
        if transport is not None:
            transport.close()

    async def _exit_code(self) -> int | None:
        """The process's exit status once it has ended (None if it has not, after a while).
        Not ``process.wait()``: on Python 3.11 that also waits for its pipes to close, which
        a process a dead handler left holding them can keep open for as long as it lives."""
        deadline = time.monotonic() + _EXIT_WAIT_S
        # Polled: asyncio tells a process's end only with its pipes' (no event of its own).
        while self.process.returncode is None and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.01)
        return self.process.returncode

    def _send(self, message: Any) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(frame(message))

    async def _receive(self, timeout_s: float) -> Any:
        assert self.process.stdout is not None
        try:
            async with asyncio.timeout(timeout_s):
                header = await self.process.stdout.readexactly(_HEADER_SIZE)
                if header[: len(REPLY_MARK)] != REPLY_MARK:  # not a reply: bytes a handler wrote
                    raise self._broken(header)
                size = int.from_bytes(header[len(REPLY_MARK) :], "big")
                if size > MAX_REPLY_BYTES:  # not read: the worker is stopped
                    self.kill(f"a reply of {size} bytes, above {MAX_REPLY_BYTES}")
                    raise HandlerFailed(
                        f"its result is larger than {MAX_REPLY_BYTES / 2**20:g} MB; return "
                        "less (a tool's result is cut to far less for the model anyway)"
                    )
                data = await self.process.stdout.readexactly(size)
        except TimeoutError:
            self.kill(f"no reply within {timeout_s:g} s")
            raise
        except asyncio.IncompleteReadError:
            raise HandlerCrashed(await self._ended()) from None
        try:
            return await _parsed(data)
        except ValueError:
            raise self._broken(data[:60]) from None

    async def _watch_exit(self) -> None:
        """Tell the worker's end to its reply stream. The stream ends when the pipe closes,
        but a process a handler forked holds the pipe too: a call would wait out its timeout
        for a worker long dead. So its exit is looked at every ``_EXIT_POLL_S``."""
        while self.process.returncode is None:  # noqa: ASYNC110 (no exit event but the pipes')
            await asyncio.sleep(_EXIT_POLL_S)
        await asyncio.sleep(_EXIT_POLL_S)  # what it wrote before it ended is read first
        stdout = self.process.stdout
        if stdout is not None and not stdout.at_eof():
            stdout.feed_eof()

    def _broken(self, reply: Any) -> HandlerCrashed:
        """The worker's reply is not the protocol's (a handler wrote to its pipe): it is
        stopped, and the call fails."""
        self.kill()
        log.error(
            "skill.worker_broke_protocol",
            skill=self.skill,
            pid=self.process.pid,
            reply=repr(reply)[:200],
        )
        return HandlerCrashed("the handler's process broke the worker protocol and was stopped")

    async def _ended(self) -> str:
        code = await self._exit_code()
        if code is None:
            return "the handler's process stopped answering"
        if code == -signal.SIGXCPU:
            return "the handler used up its CPU time and was stopped"
        if code < 0:
            return f"the handler's process was killed by signal {signal.Signals(-code).name}"
        return f"the handler's process exited with status {code}"


@dataclass
class _SkillWorkers:
    idle: list[Worker] = field(default_factory=list)
    busy: int = 0


class WorkerPool:
    """Worker processes for the skills that run out of process.

    Args:
        max_workers: Worker processes alive at most, over all skills (idle ones of other
            skills are stopped to make room).
        idle_s: A worker idle this long is stopped.
        groups: Where each worker gets a cgroup of its own (None: stopped by its tree alone).
    """

    def __init__(
        self, max_workers: int = 32, idle_s: float = 300.0, groups: WorkerGroups | None = None
    ) -> None:
        self.max_workers = max_workers
        self.idle_s = idle_s
        self.groups = groups
        self._skills: dict[str, _SkillWorkers] = {}
        self._starting = 0
        self._closing: set[asyncio.Task[None]] = set()

    @property
    def size(self) -> int:
        """Worker processes alive or starting."""
        return self._starting + sum(s.busy + len(s.idle) for s in self._skills.values())

    async def call(
        self,
        skill: Skill,
        spec: ToolSpec,
        package: str,
        call: WorkerCall,
        on_import: Any,
    ) -> Any:
        """Run ``call`` on a worker of ``skill``; raises HandlersBusy past its concurrency."""
        workers = self._skills.setdefault(skill.name, _SkillWorkers())
        limit = skill.config.concurrency
        if workers.busy >= limit:
            raise HandlersBusy(
                f"skill {skill.name!r} already runs {workers.busy} calls, its limit; "
                "try again shortly"
            )
        workers.busy += 1
        try:
            worker = await self._acquire(skill, package, workers)
        except BaseException:
            workers.busy -= 1
            raise
        try:
            return await worker.call(call, on_import)
        except asyncio.CancelledError:
            # The caller went away mid-call: the worker's next reply would be this call's.
            worker.kill("its call was cancelled")
            raise
        finally:
            workers.busy -= 1
            self._release(worker, workers)

    async def aclose(self) -> None:
        """Stop every worker."""
        workers = [w for s in self._skills.values() for w in s.idle]
        self._skills.clear()
        await asyncio.gather(*(w.close() for w in workers), *self._closing)
        if self.groups is not None:
            self.groups.release()

    async def _acquire(self, skill: Skill, package: str, workers: _SkillWorkers) -> Worker:
        now = time.monotonic()
        while workers.idle:
            worker = workers.idle.pop()
            fresh = now - worker.idle_since < self.idle_s
            if worker.alive and worker.fingerprint == skill.fingerprint and fresh:
                return worker
            self._stop(worker)  # a stale version of the skill, or idle too long
        if self.size >= self.max_workers and not self._make_room():
            raise HandlersBusy(
                f"all {self.max_workers} handler processes are busy; try again shortly"
            )
        self._starting += 1
        try:
            return await Worker.start(skill, package, self.groups)
        finally:
            self._starting -= 1

    def _release(self, worker: Worker, workers: _SkillWorkers) -> None:
        if worker.alive:  # its handler answered, or raised: it can take the next call
            worker.idle_since = time.monotonic()
            workers.idle.append(worker)
        else:
            self._stop(worker)

    def _make_room(self) -> bool:
        """Stop the longest-idle worker of any skill; False when none is idle."""
        idle = [(w.idle_since, name, w) for name, s in self._skills.items() for w in s.idle]
        if not idle:
            return False
        _, name, worker = min(idle, key=lambda item: item[0])
        self._skills[name].idle.remove(worker)
        self._stop(worker)
        return True

    def _stop(self, worker: Worker) -> None:
        task = asyncio.ensure_future(worker.close())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)
