"""Tier 3: call a skill's tool — find it, validate its arguments, make a side-effecting call
once per key (``once.py``), run its handler within its timeout where it runs (a worker process,
``workers.py``, or a handler thread of this process, ``inprocess.py``), adopt the files it made
(``files.py``) and trim its result; every failure becomes a tool error the model can read."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from functools import partial
from pathlib import Path
from typing import Any

import structlog

from agents import metrics
from agents.errors import (
    HandlerCrashed,
    HandlerFailed,
    HandlerImportFailed,
    HandlersBusy,
    SchemaUnusable,
    SkillNotFound,
)
from agents.skills.arguments import parse_arguments
from agents.skills.cgroups import WorkerGroups
from agents.skills.context import ToolContext
from agents.skills.files import adopt_files, hand_over
from agents.skills.inprocess import InProcessHandlers
from agents.skills.loader import Skill
from agents.skills.once import KeyedCall, OnceCalls
from agents.skills.packages import sibling_hint, skill_package
from agents.skills.registry import SkillRegistry
from agents.skills.results import ToolResult, effective_limits, made, result_of, tool_error
from agents.skills.spec import ResultLimits, ToolSpec
from agents.skills.trimming import Trimmed, has_files
from agents.skills.workers import HandlerRaised, WorkerCall, WorkerPool
from agents.state.attachments import AttachmentStore
from agents.state.calls import CallJournal

log = structlog.get_logger(__name__)
_IMPORT_TIMEOUT_S = 60.0  # a handler module that takes longer to load failed
_IMPORT_RETRY_S = 60.0  # a handler module that failed to load is tried again after this


class ToolRunner:
    """Runs tools of a registry's skills; handler modules are imported on first call, cached.

    Args:
        registry: Where tools are looked up.
        data_dir: Parent of each skill's writable ``data_dir``.
        trusted: The skills whose handlers may run in this process when their skill.yaml
            asks for ``isolation: thread``; any other's run in worker processes whatever it
            asks (a skill dropped in must not choose to run inside the service). None: as
            each skill asks (tests, benchmarks).
        cgroups: Each worker process in a cgroup of its own where this process may make
            one (``cgroups.py``), so nothing its handlers start outlives it.
    """

    def __init__(
        self,
        registry: SkillRegistry,
        data_dir: Path,
        trusted: frozenset[str] | None = None,
        cgroups: bool = True,
    ) -> None:
        self.registry = registry
        self.data_dir = data_dir
        self.trusted = trusted
        self._refused: set[str] = set()  # skills told they run in a worker instead
        self._local = InProcessHandlers(self._imported)
        self._workers = WorkerPool(groups=WorkerGroups.find() if cgroups else None)
        self.once = OnceCalls()  # side-effecting calls, once per key (``journal``)
        # Where files a handler makes become its thread's attachments (the service sets it).
        self.attachments: AttachmentStore | None = None
        self.imported: list[str] = []  # "skill:module" in import order (for tests and bench)
        self._made: set[Path] = set()  # skills' data dirs made by this process
        # (skill, its version, module) -> until when, and why, its import is not tried again
        self._unloadable: dict[tuple[str, str, str], tuple[float, str]] = {}

    async def call(
        self,
        tool_name: str,
        arguments: dict[str, Any] | str | None,
        *,
        thread_id: str | None = None,
        run_id: str | None = None,
        call_id: str | None = None,
        turn_id: str | None = None,
        occurrence: int = 0,
        idempotency_key: str | None = None,
    ) -> ToolResult:
        """Call ``tool_name``; every failure comes back as a ToolResult the model can read.

        The steps: find the tool, validate the arguments against its schema, import the
        handler (first call only), run it within its timeout, trim the result. A tool with
        side effects called for a turn (``turn_id``: the user message being answered) or
        with an ``idempotency_key`` is recorded in the journal first: the same call again (a
        resent message after a crash, a retried request) gets the same key, and a finished
        one its recorded result without running again.

        Args:
            occurrence: Which of several identical calls (same tool and arguments) of one
                turn this is, counted from 0, so each gets a key of its own.
        """
        started = time.perf_counter()
        try:
            skill, spec = self.registry.tool(tool_name)
        except SkillNotFound as exc:
            return tool_error(tool_name, "unknown_tool", str(exc), started)
        result = await self._call(
            skill,
            spec,
            arguments,
            started,
            thread_id=thread_id,
            run_id=run_id,
            call_id=call_id,
            turn_id=turn_id,
            occurrence=occurrence,
            idempotency_key=idempotency_key,
        )
        metrics.TOOL_CALLS.labels(skill.name, spec.name, result.error_code or "ok").inc()
        metrics.TOOL_SECONDS.labels(skill.name).observe(result.ms / 1000)
        return result

    async def _call(
        self,
        skill: Skill,
        spec: ToolSpec,
        arguments: dict[str, Any] | str | None,
        started: float,
        *,
        thread_id: str | None,
        run_id: str | None,
        call_id: str | None,
        turn_id: str | None,
        occurrence: int,
        idempotency_key: str | None,
    ) -> ToolResult:
        """``call`` once the tool is found (the journal, then the handler)."""
        tool_name = spec.name
        try:
            args, problem = parse_arguments(spec.name, spec.parameters, arguments)
        except SchemaUnusable as exc:  # the load check refuses such schemas: a safety net
            log.warning("tool.schema_unusable", skill=skill.name, tool=tool_name, error=str(exc))
            why = (
                f"the arguments of {tool_name} cannot be checked: its parameters schema "
                f"fails ({exc}); fix the schema in skill {skill.name!r}'s skill.yaml"
            )
            return tool_error(tool_name, exc.code, why, started)
        if problem is not None:
            return tool_error(tool_name, "invalid_arguments", problem, started)
        key = idempotency_key or idempotency_key_of(
            skill.name, spec.name, args, thread_id, turn_id, occurrence, call_id
        )
        if not (spec.side_effects and (idempotency_key or (thread_id and turn_id))):
            return await self._run(skill, spec, args, key, thread_id, run_id, started)
        bound = idempotency_key is not None and run_id is None  # a caller's own key
        call = KeyedCall(key, spec.name, args, thread_id, run_id, bound)
        return await self.once.call(
            call, lambda: self._run(skill, spec, args, key, thread_id, run_id, started), started
        )

    @property
    def journal(self) -> CallJournal:
        """Where side-effecting calls are recorded (the service puts it beside its
        checkpoints; in memory until then)."""
        return self.once.journal

    @journal.setter
    def journal(self, journal: CallJournal) -> None:
        self.once.journal = journal

    async def _run(
        self,
        skill: Skill,
        spec: ToolSpec,
        args: dict[str, Any],
        key: str,
        thread_id: str | None,
        run_id: str | None,
        started: float,
    ) -> ToolResult:
        tool_name = spec.name
        module = (skill.name, skill.fingerprint, spec.handler.split(":")[0])
        failed = self._unloadable.get(module)
        if failed is not None and time.monotonic() < failed[0]:
            # Not tried again at each call: a module that hangs on import cost every call
            # (and every retry) the whole import limit.
            return tool_error(tool_name, "handler_import_failed", failed[1], started)
        context = self._context(skill, spec, key, thread_id, run_id)
        limits = effective_limits(skill.config.limits, spec.limits)
        in_process = self._in_process(skill)
        try:
            if in_process:
                value = await self._local.call(
                    skill, spec, args, context, limits, started, _IMPORT_TIMEOUT_S
                )
            else:
                value = await self._in_worker(skill, spec, args, context, limits)
        except TimeoutError:
            # Warned, so an operator finds a hung handler (its worker is killed, and says so).
            log.warning(
                "tool.timeout",
                skill=skill.name,
                tool=tool_name,
                timeout_s=spec.timeout_s,
                isolation="thread" if in_process else "worker",
            )
            why = f"{tool_name} did not finish within {spec.timeout_s:g} s"
            return tool_error(tool_name, "timeout", why, started)
        except HandlersBusy as exc:
            log.warning("tool.busy", skill=skill.name, tool=tool_name, error=str(exc))
            return tool_error(tool_name, "busy", str(exc), started)
        except HandlerImportFailed as exc:
            log.warning("tool.import_failed", skill=skill.name, tool=tool_name, error=str(exc))
            why = (
                f"the handler of skill {skill.name!r} could not be loaded ({exc}"
                f"{sibling_hint(skill, str(exc))}); it is tried again in "
                f"{_IMPORT_RETRY_S:g} s, or when the skill changes"
            )
            self._unloadable[module] = (time.monotonic() + _IMPORT_RETRY_S, why)
            return tool_error(tool_name, "handler_import_failed", why, started)
        except (HandlerFailed, HandlerCrashed) as exc:
            log.info("tool.failed", skill=skill.name, tool=tool_name, error=str(exc))
            why = f"{tool_name} failed: {exc}"
            raised = exc.raised if isinstance(exc, HandlerRaised) else None  # from its worker
            return tool_error(tool_name, "tool_failed", why, started, raised=raised)
        except Exception as exc:  # what the handler raised on its thread
            log.info("tool.failed", skill=skill.name, tool=tool_name, error=str(exc))
            raised = type(exc).__name__
            why = f"{tool_name} failed: {raised}: {exc}"
            return tool_error(tool_name, "tool_failed", why, started, raised=raised)
        if isinstance(value, Trimmed):  # by its worker
            result = made(tool_name, value, started)
        elif isinstance(value, ToolResult):  # on its handler thread
            result = value
        else:  # files to adopt first, then trimmed off the loop (the value may be large)
            try:
                value = await adopt_files(value, context, self.attachments)
            except ValueError as exc:
                return tool_error(tool_name, "tool_failed", f"{tool_name}: {exc}", started)
            result = await asyncio.to_thread(result_of, tool_name, value, limits, started)
        if result.ok:
            ms, truncated = round(result.ms, 1), result.truncated
            log.info("tool.called", skill=skill.name, tool=tool_name, ms=ms, truncated=truncated)
        return result

    async def handed_over(self, result: ToolResult) -> ToolResult:
        """The result of a direct call (the tool server's: no thread keeps the files a
        handler made) with those files read into ``files`` and named in its data instead
        of by their paths on the server. A file outside the skill's data folder, missing,
        or beyond ``files.HANDED_MAX_BYTES`` in all fails the call. A call replayed from the
        journal reads them again."""
        if not result.ok or not has_files(result.data):
            return result
        try:
            skill, spec = self.registry.tool(result.tool)
        except SkillNotFound:
            return result
        limits = effective_limits(skill.config.limits, spec.limits)
        return await hand_over(result, self._data_dir(skill), limits)

    async def aclose(self) -> None:
        """Stop the worker processes, once the side effects under way have ended (for a
        while: ``OnceCalls.aclose``)."""
        await self.once.aclose()
        await self._workers.aclose()

    def _in_process(self, skill: Skill) -> bool:
        """Whether the skill's handlers run on threads of this process: it asks for it
        (``isolation: thread``) and is trusted to."""
        if skill.config.isolation != "thread":
            return False
        if self.trusted is None or skill.name in self.trusted:
            return True
        if skill.name not in self._refused:
            self._refused.add(skill.name)
            log.warning(
                "skill.isolation_refused",
                skill=skill.name,
                why="its skill.yaml asks for isolation: thread, but it is not in "
                "SKILLDESK_SKILLS_TRUSTED: its handlers run in worker processes",
            )
        return False

    async def _in_worker(
        self,
        skill: Skill,
        spec: ToolSpec,
        args: dict[str, Any],
        context: ToolContext,
        limits: ResultLimits,
    ) -> Any:
        """The handler's value from a worker process of the skill, trimmed there to
        ``limits`` (``Trimmed``), or whole when it has files to adopt first."""
        module, function = spec.handler.split(":")
        timeouts = (spec.timeout_s, _IMPORT_TIMEOUT_S)
        call = WorkerCall(module, function, args, context, *timeouts, limits.model_dump())
        return await self._workers.call(
            skill, spec, skill_package(skill), call, partial(self._imported, skill.name)
        )

    def _context(
        self, skill: Skill, spec: ToolSpec, key: str, thread_id: str | None, run_id: str | None
    ) -> ToolContext:
        data_dir = self._data_dir(skill)
        if data_dir not in self._made:  # once: an existing dir costs a failed mkdir and a stat
            data_dir.mkdir(parents=True, exist_ok=True)
            self._made.add(data_dir)
        return ToolContext(skill.name, spec.name, skill.path, data_dir, key, thread_id, run_id)

    def _data_dir(self, skill: Skill) -> Path:
        """The skill's own writable folder (``ToolContext.data_dir``)."""
        return self.data_dir / "skills" / skill.name

    def _imported(self, skill: str, module: str) -> None:
        self.imported.append(f"{skill}:{module}")


def idempotency_key_of(
    skill: str,
    tool: str,
    args: dict[str, Any],
    thread_id: str | None,
    turn_id: str | None,
    occurrence: int = 0,
    call_id: str | None = None,
) -> str:
    """The key of one logical call. For a turn: the thread, the user message answered, the
    tool, its arguments and which identical call of the turn it is, so a run that answers the
    same message again (the message resent after a crash) makes calls with the same keys,
    whatever ids the model gives them. Else (thread, call id), else the arguments alone."""
    arguments = json.dumps(args, sort_keys=True, default=str)
    if thread_id and turn_id:
        basis = f"{thread_id}|{turn_id}|{arguments}|{occurrence}"
    elif thread_id and call_id:
        basis = f"{thread_id}|{call_id}"
    else:
        basis = arguments
    return hashlib.sha256(f"{skill}|{tool}|{basis}".encode()).hexdigest()[:32]
