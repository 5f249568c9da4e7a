"""One object that keeps the registry, the index and the runner in step."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import structlog

from agents.owners import tool_owners
from agents.skills.embeddings import Embedder, EmbeddingCache, Precision, make_embedder
from agents.skills.index import SearchHit, SkillEntry, SkillIndex
from agents.skills.loader import Skill
from agents.skills.registry import ReloadReport, SkillRegistry
from agents.skills.results import ToolResult
from agents.skills.runner import ToolRunner

log = structlog.get_logger(__name__)
T = TypeVar("T")
RELOAD_WAIT_S = 30.0  # closing waits this long at most for a reload under way


@dataclass(frozen=True)
class SkillsOptions:
    """How the skills of one folder are served."""

    directory: Path
    data_dir: Path
    embeddings: bool = True
    embedding_precision: Precision = "int8"
    embedding_model: Path | None = None  # a local sentence-transformers folder; None: MiniLM
    dense_weight: float = 0.5
    # Skills whose handlers may run in the service's process (``isolation: thread``); None:
    # as each skill asks (``ToolRunner``).
    trusted: frozenset[str] | None = None
    worker_cgroups: bool = True  # each worker process in a cgroup of its own, where it may
    # Keep the tool owners file in data_dir up to date (the service's); False: only read it.
    record_owners: bool = False


class SkillService:
    """Registry + index + runner for one skills folder."""

    def __init__(self, options: SkillsOptions, embedder: Embedder | None = None) -> None:
        self.options = options
        self.registry = SkillRegistry(
            options.directory, tool_owners(options.data_dir, write=options.record_owners)
        )
        cache = None
        if options.embeddings:
            cache = EmbeddingCache(
                options.data_dir / "cache" / "embeddings.sqlite",
                embedder or make_embedder(options.embedding_precision, options.embedding_model),
            )
        self.index = SkillIndex(cache, dense_weight=options.dense_weight)
        self.runner = ToolRunner(
            self.registry, options.data_dir, options.trusted, options.worker_cgroups
        )
        self._reload_lock = asyncio.Lock()
        self._build_lock = threading.Lock()
        # Examples the model wrote (agents/skills/written.py), by skill: the version they
        # were written for (its folder's fingerprint) and the texts.
        self._written: dict[str, tuple[str, tuple[str, ...]]] = {}
        self._reloading: asyncio.Future[ReloadReport] | None = None  # on its thread

    def reload(self) -> ReloadReport:
        """Rescan the folder and rebuild the index when anything changed."""
        started = time.perf_counter()
        report = self.registry.reload()
        if report.changed_anything or (not len(self.index) and len(self.registry)):
            self._build()
        if report.changed_anything:
            log.info(
                "skills.live",
                ms=round((time.perf_counter() - started) * 1000, 1),
                skills=len(self.registry),
            )
        return report

    def _entry(self, skill: Skill) -> SkillEntry:
        written = self._written.get(skill.name)
        if written is None or written[0] != skill.fingerprint or skill.config.examples:
            return SkillEntry.of(skill)
        return SkillEntry.of(skill, written[1])

    def _build(self) -> None:
        with self._build_lock:  # a reload and newly written examples may rebuild at once
            self.index.build([self._entry(s) for s in self.registry.all()])

    def add_written(self, found: dict[str, tuple[str, tuple[str, ...]]]) -> None:
        """Index examples the model wrote: ``{skill: (fingerprint, examples)}``, each for the
        version of the skill its fingerprint names (a skill edited since keeps none)."""
        self._written.update(found)
        self._build()

    def written(self, name: str) -> tuple[str, ...]:
        """The model-written examples the index holds for skill ``name``."""
        entry = self.index.entry(name)
        skill = self.registry.get(name) if name in self.registry else None
        if entry is None or skill is None or skill.config.examples:
            return ()
        return entry.examples

    async def areload(self) -> ReloadReport:
        """``reload`` off the event loop, one at a time (``aclose`` waits for the one under
        way: its thread goes on whoever cancels the caller)."""
        async with self._reload_lock:
            reloading = self._reloading = asyncio.ensure_future(asyncio.to_thread(self.reload))
            try:
                return await asyncio.shield(reloading)
            except asyncio.CancelledError:  # its thread goes on: the next waits for it
                reloading.add_done_callback(_retrieved)
                await asyncio.wait([reloading])
                raise

    def search(self, query: str, k: int = 5) -> list[SearchHit]:
        """The best skills for ``query``."""
        return self.index.search(query, k=k)

    def prefetch(self, queries: list[str]) -> None:
        """Embed several queries at once before searching them one by one."""
        self.index.prefetch(queries)

    def anticipate(self, queries: list[str]) -> None:
        """Start embedding queries about to be searched; returns at once."""
        self.index.anticipate(queries)

    async def off_loop(self, function: Callable[..., T], /, *args: object) -> T:
        """Run retrieval work (searches) off the event loop, beside the query encoder."""
        return await self.index.off_loop(function, *args)

    async def call(
        self, tool: str, arguments: dict[str, Any] | str | None, **context: Any
    ) -> ToolResult:
        """Call one tool (see ToolRunner.call)."""
        return await self.runner.call(tool, arguments, **context)

    async def handed_over(self, result: ToolResult) -> ToolResult:
        """A direct call's result with the files its handler made (see
        ToolRunner.handed_over)."""
        return await self.runner.handed_over(result)

    async def finish_calls(self) -> None:
        """Wait for the side-effecting calls under way (those a stopped run left go on: see
        ``OnceCalls``), so their ends reach the journal before the store closes; a call
        still going after ``OnceCalls.aclose``'s wait is made again, with its key, later."""
        await self.runner.once.aclose()

    async def aclose(self) -> None:
        """Stop what runs handlers (worker processes), once a reload under way is through
        (``RELOAD_WAIT_S`` at most): it would otherwise go on, and log, past the service."""
        if self._reloading is not None and not self._reloading.done():
            await asyncio.wait([self._reloading], timeout=RELOAD_WAIT_S)
        await self.runner.aclose()


def _retrieved(future: asyncio.Future[Any]) -> None:
    """Take a future's outcome (asyncio logs one that failed and was never retrieved)."""
    if not future.cancelled() and future.exception() is not None:
        log.warning("skills.reload_failed", error=str(future.exception()))
