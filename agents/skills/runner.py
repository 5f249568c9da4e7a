"""Tier 3: call a skill's tool — validate, import the handler lazily, run with a timeout, trim."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import hashlib
import importlib.util
import inspect
import json
import os
import queue
import re
import sys
import threading
import time
import types
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import structlog
from jsonschema import Draft202012Validator

from agents.skills.context import ToolContext
from agents.skills.loader import Skill
from agents.skills.registry import SkillNotFound, SkillRegistry
from agents.skills.spec import ResultLimits, ToolSpec

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class ToolResult:
    """What a tool call produced: the text the model reads, and whether it worked."""

    tool: str
    ok: bool
    content: str
    data: Any = None
    error_code: str | None = None
    truncated: bool = False
    ms: float = 0.0


class ToolRunner:
    """Runs tools of a registry's skills; handler modules are imported on first call, cached.

    Args:
        registry: Where tools are looked up.
        data_dir: Parent of each skill's writable ``data_dir``.
    """

    def __init__(self, registry: SkillRegistry, data_dir: Path) -> None:
        self.registry = registry
        self.data_dir = data_dir
        self._modules: dict[tuple[str, str, str], types.ModuleType] = {}
        self._lock = threading.Lock()
        self._threads = HandlerThreads()
        self.imported: list[str] = []  # "skill:module" in import order (for tests and bench)

    async def call(
        self,
        tool_name: str,
        arguments: dict[str, Any] | str | None,
        *,
        thread_id: str | None = None,
        run_id: str | None = None,
        call_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> ToolResult:
        """Call ``tool_name``; every failure comes back as a ToolResult the model can read."""
        started = time.perf_counter()
        try:
            skill, spec = self.registry.tool(tool_name)
        except SkillNotFound as exc:
            return _error(tool_name, "unknown_tool", str(exc), started)
        args, problem = _parse_arguments(spec, arguments)
        if problem is not None:
            return _error(tool_name, "invalid_arguments", problem, started)
        try:  # imported off the event loop: a slow import must not stall other requests
            function = self._cached(skill, spec)
            if function is None:
                function = await asyncio.wait_for(
                    self._threads.run(self._function, skill, spec), _IMPORT_TIMEOUT_S
                )
        except TimeoutError:
            return _error(
                tool_name,
                "handler_import_failed",
                f"the handler of skill {skill.name!r} did not load within {_IMPORT_TIMEOUT_S:g} s",
                started,
            )
        except Exception as exc:
            log.warning("tool.import_failed", skill=skill.name, tool=tool_name, error=str(exc))
            return _error(
                tool_name,
                "handler_import_failed",
                f"the handler of skill {skill.name!r} could not be loaded "
                f"({type(exc).__name__}: {exc})",
                started,
            )
        key = idempotency_key or _idempotency_key(skill.name, spec.name, args, thread_id, call_id)
        if "context" in inspect.signature(function).parameters:
            data_dir = self.data_dir / "skills" / skill.name
            data_dir.mkdir(parents=True, exist_ok=True)
            args["context"] = ToolContext(
                skill.name, spec.name, skill.path, data_dir, key, thread_id, run_id
            )
        try:
            if inspect.iscoroutinefunction(function):
                value = await asyncio.wait_for(_contained(function(**args)), spec.timeout_s)
            else:
                value = await asyncio.wait_for(self._threads.run(function, **args), spec.timeout_s)
        except TimeoutError:
            return _error(
                tool_name,
                "timeout",
                f"{tool_name} did not finish within {spec.timeout_s:g} s",
                started,
            )
        except HandlersBusy as exc:
            return _error(tool_name, "busy", str(exc), started)
        except Exception as exc:
            log.info("tool.failed", skill=skill.name, tool=tool_name, error=str(exc))
            return _error(
                tool_name,
                "tool_failed",
                f"{tool_name} failed: {type(exc).__name__}: {exc}",
                started,
            )
        limits = effective_limits(skill.config.limits, spec.limits)
        try:
            content, data, truncated = trim(value, limits)
        except (TypeError, ValueError) as exc:
            return _error(
                tool_name,
                "tool_failed",
                f"{tool_name} returned data that is not JSON: {exc}",
                started,
            )
        ms = (time.perf_counter() - started) * 1000
        log.info(
            "tool.called", skill=skill.name, tool=tool_name, ms=round(ms, 1), truncated=truncated
        )
        return ToolResult(tool_name, True, content, data, None, truncated, ms)

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


class HandlerExit(RuntimeError):
    """A handler raised what is not a plain Exception (SystemExit, KeyboardInterrupt,
    CancelledError) or a StopIteration: a failed call, not a stopped service or run."""


class HandlersBusy(RuntimeError):
    """Every handler thread is taken (hung handlers keep theirs)."""


_IMPORT_TIMEOUT_S = 60.0
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
        self._count = threading.Lock()
        self._idle: list[queue.SimpleQueue[_Job]] = []  # the inboxes of waiting threads
        self._pid = os.getpid()

    async def run(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``function(*args, **kwargs)`` on a handler thread; raises HandlersBusy at the limit."""
        with self._count:
            if self._pid != os.getpid():  # a forked child has none of the parent's threads
                self._pid, self._idle, self.running = os.getpid(), [], 0
            if self.running >= self.limit:
                raise HandlersBusy(
                    f"{self.running} handler calls are still running (hung ones included); "
                    "try again later"
                )
            self.running += 1
            inbox = self._idle.pop() if self._idle else None
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        job = _Job(partial(contextvars.copy_context().run, function, *args, **kwargs), loop, future)
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
                self._idle.append(inbox)
            with contextlib.suppress(RuntimeError):  # the loop closed while it hung
                job.loop.call_soon_threadsafe(_settle, job.future, result, error)


@dataclass(frozen=True)
class _Job:
    call: Callable[[], Any]
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[Any]


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.done():  # timed out meanwhile
        return
    if error is None:
        future.set_result(result)
    else:
        future.set_exception(error)


async def _contained(call: Awaitable[Any]) -> Any:
    """Await an async handler; SystemExit or KeyboardInterrupt becomes a HandlerExit.

    Only the handler's own coroutine is covered: a task it spawns and never awaits is outside
    (await what you start). CancelledError passes through: it is how the timeout stops it.
    """
    try:
        return await call
    except (SystemExit, KeyboardInterrupt) as exc:
        raise _as_error(exc) from None


def _as_error(exc: BaseException) -> BaseException:
    # Anything but a plain Exception (SystemExit, CancelledError...) would stop more than the
    # call; a StopIteration cannot be set on a future at all.
    if not isinstance(exc, Exception) or isinstance(exc, StopIteration | StopAsyncIteration):
        return HandlerExit(f"the handler raised {type(exc).__name__}({exc})")
    return exc


def _lists(value: Any) -> Any:
    """A top-level tuple or set as a list, so the item limit applies to it."""
    return list(value) if isinstance(value, tuple | set | frozenset) else value


def _text(value: Any) -> Any:
    if isinstance(value, set | frozenset):
        return list(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)


def _import(skill: Skill, module_name: str) -> types.ModuleType:
    # Each skill folder becomes a package of its own, so a handler may import its siblings
    # relatively, and two skills' `handler` modules never collide.
    package = "_skilldesk_skill_" + re.sub(r"\W", "_", skill.name) + "_" + skill.fingerprint[:8]
    if package not in sys.modules:
        parent = types.ModuleType(package)
        parent.__path__ = [str(skill.path)]
        sys.modules[package] = parent
    path = skill.path.joinpath(*module_name.split(".")).with_suffix(".py")
    full_name = f"{package}.{module_name}"
    spec = importlib.util.spec_from_file_location(full_name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[full_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(full_name, None)
        raise
    return module


def _parse_arguments(
    spec: ToolSpec, arguments: dict[str, Any] | str | None
) -> tuple[dict[str, Any], str | None]:
    if arguments is None or arguments == "":
        arguments = {}
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError as exc:
            return {}, (
                f"the arguments of {spec.name} are not valid JSON ({exc.msg} at "
                f"position {exc.pos}); send a JSON object matching its parameters"
            )
    if not isinstance(arguments, dict):
        return {}, f"the arguments of {spec.name} must be a JSON object"
    validator = Draft202012Validator(
        spec.parameters, format_checker=Draft202012Validator.FORMAT_CHECKER
    )
    errors = sorted(validator.iter_errors(arguments), key=lambda e: list(e.absolute_path))
    if errors:
        parts = []
        for err in errors[:5]:
            where = ".".join(str(p) for p in err.absolute_path)
            message = err.message
            if err.context:  # anyOf/oneOf: say what each alternative wanted
                options = sorted({e.message for e in err.context})[:4]
                message = "expected one of: " + " | ".join(options)
            parts.append(f"{where}: {message}" if where else message)
        return {}, f"invalid arguments for {spec.name}: " + "; ".join(parts)
    return dict(arguments), None


def effective_limits(skill: ResultLimits, tool: ResultLimits | None) -> ResultLimits:
    """A tool's limits override the skill's field by field (only the fields it sets)."""
    if tool is None:
        return skill
    return skill.model_copy(update={k: getattr(tool, k) for k in tool.model_fields_set})


def _idempotency_key(
    skill: str, tool: str, args: dict[str, Any], thread_id: str | None, call_id: str | None
) -> str:
    # A resumed run replays the same tool call id, so (thread, call id) identifies the call;
    # without them, the same arguments are the same call.
    basis = (
        f"{thread_id}|{call_id}"
        if thread_id and call_id
        else json.dumps(args, sort_keys=True, default=str)
    )
    return hashlib.sha256(f"{skill}|{tool}|{basis}".encode()).hexdigest()[:32]


def trim(value: Any, limits: ResultLimits) -> tuple[str, Any, bool]:
    """Apply the declared limits: keep fields, cap items, cap characters."""
    truncated = False
    data = _lists(value)
    if limits.keep_fields is not None:
        data = _keep(data, set(limits.keep_fields))
    if limits.max_items is not None and isinstance(data, list) and len(data) > limits.max_items:
        data, truncated = data[: limits.max_items], True
    elif limits.max_items is not None and isinstance(data, dict):
        for key, item in list(data.items()):
            if isinstance(item, list) and len(item) > limits.max_items:
                data = {**data, key: item[: limits.max_items]}
                truncated = True
    if isinstance(data, str):
        text = data
    else:  # the data becomes JSON as the model reads it (sets as lists, bytes as text)
        text = json.dumps(data, ensure_ascii=False, default=_text)
        data = json.loads(text)
    if len(text) > limits.max_chars:
        cut = len(text) - limits.max_chars
        text = text[: limits.max_chars] + f"…[truncated {cut} characters]"
        truncated = True
    return text, data, truncated


def _keep(value: Any, fields: set[str]) -> Any:
    if isinstance(value, dict):
        if fields & value.keys():
            return {k: v for k, v in value.items() if k in fields}
        return {k: _keep(v, fields) for k, v in value.items()}
    if isinstance(value, list):
        return [_keep(v, fields) for v in value]
    return value


def _error(tool: str, code: str, message: str, started: float) -> ToolResult:
    return ToolResult(
        tool,
        False,
        f"error ({code}): {message}",
        None,
        code,
        False,
        (time.perf_counter() - started) * 1000,
    )
