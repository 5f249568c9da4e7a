"""Handlers that run in the service's process (``isolation: thread``, for trusted skills:
``ToolRunner``): each module imported on its first call, off the event loop, and kept per
version of its skill; each call made on a handler thread (``threads.py``) and its result
trimmed there. The other skills' handlers run in worker processes (``workers.py``)."""

from __future__ import annotations

import asyncio
import inspect
import threading
import types
from collections.abc import Callable
from functools import partial
from typing import Any

from agents.errors import HandlerImportFailed, HandlersBusy
from agents.skills.context import ToolContext
from agents.skills.importing import import_handler
from agents.skills.loader import Skill
from agents.skills.packages import skill_package
from agents.skills.results import called
from agents.skills.spec import ResultLimits, ToolSpec
from agents.skills.threads import HandlerThreads


class InProcessHandlers:
    """Imports and calls the handlers of the skills that run in this process.

    Args:
        on_import: Called with the skill's and the module's name of each module imported.
    """

    def __init__(self, on_import: Callable[[str, str], None]) -> None:
        self._on_import = on_import
        self._modules: dict[tuple[str, str, str], types.ModuleType] = {}
        self._lock = threading.Lock()
        self._threads = HandlerThreads()

    async def call(
        self,
        skill: Skill,
        spec: ToolSpec,
        args: dict[str, Any],
        context: ToolContext,
        limits: ResultLimits,
        started: float,
        import_timeout_s: float,
    ) -> Any:
        """The handler's result from a handler thread, trimmed there to ``limits`` right after
        the call (``ToolResult``), or its value when it has files to adopt first. Async
        handlers run there too, on a loop of their own: one that blocks cannot stall the
        service's.

        Raises:
            TimeoutError: the call outlived the tool's ``timeout_s``.
            HandlersBusy: no handler thread is free for it.
            HandlerImportFailed: its module did not load (within ``import_timeout_s``).
        """
        function = await self._load(skill, spec, import_timeout_s)
        if "context" in inspect.signature(function).parameters:
            args = {**args, "context": context}
        if inspect.iscoroutinefunction(function):
            call = partial(_run_coroutine, function, args, spec.timeout_s)
        else:
            call = partial(function, **args)
        quota, trimmed = skill.config.concurrency, (spec.name, limits, started)
        run = self._threads.run_for(skill.name, quota, called, call, *trimmed)
        return await asyncio.wait_for(run, spec.timeout_s)

    async def _load(self, skill: Skill, spec: ToolSpec, timeout_s: float) -> Any:
        """The handler function, imported on first use."""
        function = self._cached(skill, spec)
        if function is not None:
            return function
        try:  # imported off the event loop: a slow import must not stall other requests
            return await asyncio.wait_for(self._threads.run(self._function, skill, spec), timeout_s)
        except TimeoutError:
            raise HandlerImportFailed(f"it did not load within {timeout_s:g} s") from None
        except HandlersBusy:
            raise
        except Exception as exc:
            raise HandlerImportFailed(f"{type(exc).__name__}: {exc}") from None

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
                module = import_handler(
                    skill_package(skill), str(skill.path), module_name, skill.code
                )
                self._modules = {
                    k: v for k, v in self._modules.items() if k[:2] != key[:2]
                }  # drop an older version of this skill
                self._modules[key] = module
                self._on_import(skill.name, module_name)
        return getattr(module, function_name)


def _run_coroutine(function: Any, args: dict[str, Any], timeout_s: float) -> Any:
    """Run an async handler to its end on a loop of this thread, cancelled at the timeout
    when it yields."""
    return asyncio.run(asyncio.wait_for(function(**args), timeout_s))
