"""Tier 3: call a skill's tool — validate, import the handler lazily, run with a timeout, trim
(where the handler runs: its worker process, or its handler thread)."""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import json
import re
import threading
import time
import types
from dataclasses import replace
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
from agents.skills.loader import Skill
from agents.skills.once import KeyedCall, OnceCalls
from agents.skills.registry import SkillRegistry
from agents.skills.results import (
    MadeFile,
    ToolResult,
    called,
    effective_limits,
    made,
    result_of,
    tool_error,
)
from agents.skills.spec import ResultLimits, ToolSpec
from agents.skills.threads import HandlerThreads
from agents.skills.trimming import Trimmed, has_files
from agents.skills.worker import import_handler
from agents.skills.workers import WorkerCall, WorkerPool
from agents.state.attachments import AttachmentStore, media_type_of
from agents.state.calls import CallJournal

log = structlog.get_logger(__name__)
_IMPORT_TIMEOUT_S = 60.0
HANDED_MAX_BYTES = 16 * 2**20  # files a direct call returns with its result, in all
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
        self._modules: dict[tuple[str, str, str], types.ModuleType] = {}
        self._lock = threading.Lock()
        self._threads = HandlerThreads()
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
        try:
            if self._in_process(skill):
                value = await self._in_thread(skill, spec, args, context, limits, started)
            else:
                value = await self._in_worker(skill, spec, args, context, limits)
        except TimeoutError:
            why = f"{tool_name} did not finish within {spec.timeout_s:g} s"
            return tool_error(tool_name, "timeout", why, started)
        except HandlersBusy as exc:
            return tool_error(tool_name, "busy", str(exc), started)
        except HandlerImportFailed as exc:
            log.warning("tool.import_failed", skill=skill.name, tool=tool_name, error=str(exc))
            why = (
                f"the handler of skill {skill.name!r} could not be loaded ({exc}"
                f"{_sibling_hint(skill, str(exc))}); it is tried again in "
                f"{_IMPORT_RETRY_S:g} s, or when the skill changes"
            )
            self._unloadable[module] = (time.monotonic() + _IMPORT_RETRY_S, why)
            return tool_error(tool_name, "handler_import_failed", why, started)
        except (HandlerFailed, HandlerCrashed) as exc:
            log.info("tool.failed", skill=skill.name, tool=tool_name, error=str(exc))
            return tool_error(tool_name, "tool_failed", f"{tool_name} failed: {exc}", started)
        except Exception as exc:
            log.info("tool.failed", skill=skill.name, tool=tool_name, error=str(exc))
            why = f"{tool_name} failed: {type(exc).__name__}: {exc}"
            return tool_error(tool_name, "tool_failed", why, started)
        if isinstance(value, Trimmed):  # by its worker
            result = made(tool_name, value, started)
        elif isinstance(value, ToolResult):  # on its handler thread
            result = value
        else:  # files to adopt first, then trimmed off the loop (the value may be large)
            try:
                value = await self._adopt_files(value, context)
            except ValueError as exc:
                return tool_error(tool_name, "tool_failed", f"{tool_name}: {exc}", started)
            result = await asyncio.to_thread(result_of, tool_name, value, limits, started)
        if result.ok:
            ms, truncated = round(result.ms, 1), result.truncated
            log.info("tool.called", skill=skill.name, tool=tool_name, ms=ms, truncated=truncated)
        return result

    async def _adopt_files(self, value: Any, context: ToolContext) -> Any:
        """Files a handler made (a result's ``files``: paths in its ``data_dir``, or
        ``{"path", "caption"}``) become attachments of the thread, and the result the model
        reads names each by attachment id instead of a path on the server. Without a thread
        the paths stay, for ``handed_over`` (a direct caller) to replace.

        Raises:
            ValueError: a file outside the skill's data folder, or missing.
        """
        files = value.get("files") if isinstance(value, dict) else None
        if not files or self.attachments is None or not context.thread_id:
            return value
        adopted, specs = [], _file_specs(files)
        for spec in specs:
            path = await asyncio.to_thread(_own_file, context.data_dir, spec.get("path"))
            made = await self.attachments.adopt(
                context.thread_id,
                path,
                key=context.idempotency_key,
                caption=str(spec.get("caption", "")),
                run_id=context.run_id or "",
            )
            adopted.append({k: made.get(k) for k in ("id", "name", "media_type", "size")})
        return {**_without_paths(value, specs), "files": adopted}

    async def handed_over(self, result: ToolResult) -> ToolResult:
        """The result of a direct call (the tool server's: no thread keeps the files a
        handler made) with those files read into ``files`` and named in its data instead
        of by their paths on the server. A file outside the skill's data folder, missing,
        or beyond ``HANDED_MAX_BYTES`` in all fails the call. A call replayed from the
        journal reads them again."""
        if not result.ok or not has_files(result.data):
            return result
        started = time.perf_counter() - result.ms / 1000
        try:
            skill, spec = self.registry.tool(result.tool)
        except SkillNotFound:
            return result
        specs = _file_specs(result.data["files"])
        data_dir = self.data_dir / "skills" / skill.name
        try:
            made = await asyncio.to_thread(_read_files, data_dir, specs)
        except ValueError as exc:  # it ran (its side effects made): the files alone fail
            why = f"{result.tool} ran, but its files cannot be returned: {exc}"
            return tool_error(result.tool, "tool_failed", why, started)
        named = [{"name": f.name, "media_type": f.media_type, "size": len(f.data)} for f in made]
        for entry, file in zip(named, made, strict=True):
            if file.caption:
                entry["caption"] = file.caption
        value = {**_without_paths(result.data, specs), "files": named}
        limits = effective_limits(skill.config.limits, spec.limits)
        trimmed = await asyncio.to_thread(result_of, result.tool, value, limits, started)
        return replace(trimmed, files=tuple(made) if trimmed.ok else ())

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
            skill, spec, _package(skill), call, lambda m: self.imported.append(f"{skill.name}:{m}")
        )

    async def _in_thread(
        self,
        skill: Skill,
        spec: ToolSpec,
        args: dict[str, Any],
        context: ToolContext,
        limits: ResultLimits,
        started: float,
    ) -> Any:
        """The handler's result from a handler thread of this process (``isolation: thread``),
        trimmed there to ``limits`` right after the call (``ToolResult``), or its value when
        it has files to adopt first. Async handlers run there too, on a loop of their own:
        one that blocks cannot stall the service's."""
        function = await self._load(skill, spec)
        if "context" in inspect.signature(function).parameters:
            args = {**args, "context": context}
        if inspect.iscoroutinefunction(function):
            call = partial(_run_coroutine, function, args, spec.timeout_s)
        else:
            call = partial(function, **args)
        quota, trimmed = skill.config.concurrency, (spec.name, limits, started)
        run = self._threads.run_for(skill.name, quota, called, call, *trimmed)
        return await asyncio.wait_for(run, spec.timeout_s)

    async def _load(self, skill: Skill, spec: ToolSpec) -> Any:
        """The handler function, imported on first use."""
        function = self._cached(skill, spec)
        if function is not None:
            return function
        try:  # imported off the event loop: a slow import must not stall other requests
            return await asyncio.wait_for(
                self._threads.run(self._function, skill, spec), _IMPORT_TIMEOUT_S
            )
        except TimeoutError:
            raise HandlerImportFailed(f"it did not load within {_IMPORT_TIMEOUT_S:g} s") from None
        except HandlersBusy:
            raise
        except Exception as exc:
            raise HandlerImportFailed(f"{type(exc).__name__}: {exc}") from None

    def _context(
        self, skill: Skill, spec: ToolSpec, key: str, thread_id: str | None, run_id: str | None
    ) -> ToolContext:
        data_dir = self.data_dir / "skills" / skill.name
        if data_dir not in self._made:  # once: an existing dir costs a failed mkdir and a stat
            data_dir.mkdir(parents=True, exist_ok=True)
            self._made.add(data_dir)
        return ToolContext(skill.name, spec.name, skill.path, data_dir, key, thread_id, run_id)

    def _cached(self, skill: Skill, spec: ToolSpec) -> Any:
        module_name, function_name = spec.handler.split(":")
        module = self._modules.get((skill.name, module_name, skill.fingerprint))
        return None if module is None else getattr(module, function_name)

    def _function(self, skill: Skill, spec: ToolSpec) -> Any:
        module_name, function_name = spec.handler.split(":")
        key = (skill.name, module_name, skill.fingerprint)
        with self._lock:
            module = self._modules.get(key)
            if module is None:
                module = _import(skill, module_name)
                self._modules = {
                    k: v for k, v in self._modules.items() if k[:2] != key[:2]
                }  # drop an older version of this skill
                self._modules[key] = module
                self.imported.append(f"{skill.name}:{module_name}")
        return getattr(module, function_name)


def _file_specs(files: Any) -> list[dict[str, Any]]:
    """A result's ``files`` as ``{"path", "caption"?}`` each (a path alone, or a list)."""
    return [
        f if isinstance(f, dict) else {"path": f}
        for f in (files if isinstance(files, list) else [files])
    ]


def _without_paths(value: dict[str, Any], specs: list[dict[str, Any]]) -> dict[str, Any]:
    """``value`` without the fields and items, at any depth, that only repeat a file's path:
    a server path means nothing to the model, the user or another agent."""
    paths = {str(spec.get("path")) for spec in specs}

    def kept(item: Any) -> Any:
        if isinstance(item, dict):
            return {k: kept(v) for k, v in item.items() if not _is_path(v, paths)}
        if isinstance(item, list):
            return [kept(v) for v in item if not _is_path(v, paths)]
        return item

    return {k: kept(v) for k, v in value.items() if k != "files" and not _is_path(v, paths)}


def _is_path(item: Any, paths: set[str]) -> bool:
    return isinstance(item, str) and item in paths


def _read_files(data_dir: Path, specs: list[dict[str, Any]]) -> list[MadeFile]:
    """The files ``specs`` name, read (each one of the skill's, see ``_own_file``).

    Raises:
        ValueError: a file not the skill's, or more than ``HANDED_MAX_BYTES`` in all.
    """
    paths = [_own_file(data_dir, spec.get("path")) for spec in specs]
    total = sum(path.stat().st_size for path in paths)
    if total > HANDED_MAX_BYTES:
        raise ValueError(
            f"the files it made come to {total:,} bytes, more than the "
            f"{HANDED_MAX_BYTES:,} a call returns with its result"
        )
    return [
        MadeFile(
            path.name, media_type_of(path.name), path.read_bytes(), str(spec.get("caption") or "")
        )
        for spec, path in zip(specs, paths, strict=True)
    ]


def _own_file(data_dir: Path, path: Any) -> Path:
    """``path`` resolved, if it is a file in ``data_dir`` (a handler may not hand out others).

    Raises:
        ValueError: naming the path.
    """
    resolved = Path(str(path or "")).resolve()
    if not resolved.is_relative_to(data_dir.resolve()) or not resolved.is_file():
        # Its name only: the server's folders are not the caller's to see.
        name = Path(str(path or "")).name
        raise ValueError(f"the file {name!r} is not a file in the skill's data folder")
    return resolved


def _sibling_hint(skill: Skill, error: str) -> str:
    """For a module of the skill's own folder imported as a top-level one (``import
    helpers``): how to import it (the folder is a package, not on ``sys.path``)."""
    found = re.search(r"No module named '([A-Za-z_][A-Za-z0-9_]*)", error)
    if found is None:
        return ""
    name = found.group(1)
    if not ((skill.path / f"{name}.py").is_file() or (skill.path / name).is_dir()):
        return ""
    return f"; {name} is a module of the skill's folder: import it as `from .{name} import ...`"


def _package(skill: Skill) -> str:
    """The package a skill's folder becomes, so that a handler may import its siblings
    relatively and two skills' ``handler`` modules never collide."""
    return "_skilldesk_skill_" + re.sub(r"\W", "_", skill.name) + "_" + skill.fingerprint[:8]


def _run_coroutine(function: Any, args: dict[str, Any], timeout_s: float) -> Any:
    """Run an async handler to its end on a loop of this thread, cancelled at the timeout
    when it yields."""
    return asyncio.run(asyncio.wait_for(function(**args), timeout_s))


def _import(skill: Skill, module_name: str) -> types.ModuleType:
    return import_handler(_package(skill), str(skill.path), module_name, skill.code)


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
