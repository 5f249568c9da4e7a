"""Example messages the configured model writes for skills that have none, so that dense
retrieval matches users' words and not only a catalogue's description.

Written once per skill version (its name, description, triggers and instructions) and model,
in the background after a (re)load, never on a request's path; cached on disk by content hash
like the embeddings, so a restart asks the model nothing. A skill with examples of its own is
left alone; a failed call is logged and not retried until the next start.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path

import structlog

from agents.errors import ModelError
from agents.models import ModelGateway
from agents.models.structured import forced_call, function_tool
from agents.prompts import Prompts
from agents.skills.embeddings import rows_by_key
from agents.skills.loader import Skill
from agents.skills.service import SkillService

log = structlog.get_logger(__name__)
TOOL = "write_examples"
MOST = 8  # examples kept per skill
_INSTRUCTIONS = 2000  # characters of the instructions the model reads
_BATCH = 16  # skills written between two re-indexings


def wants_examples(skill: Skill) -> bool:
    """Whether the model should write examples for ``skill`` (it has none of its own)."""
    return not skill.config.examples


class WrittenExamples:
    """The model-written examples of every skill version, on disk (SQLite) and in memory.

    Args:
        path: The cache file (``None``: in memory only).
        gateway: The model gateway; unconfigured means nothing is written.
        prompts: Where ``skill_examples.md`` and ``tools/write_examples.yaml`` come from.
    """

    def __init__(self, path: Path | None, gateway: ModelGateway, prompts: Prompts) -> None:
        self.gateway = gateway
        self.prompts = prompts
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(str(path), check_same_thread=False)
            self._db.execute("CREATE TABLE IF NOT EXISTS written (key TEXT PRIMARY KEY, body TEXT)")
            self._db.commit()
        self._tried: set[str] = set()  # keys the model failed on since start (not asked again)
        self._task: asyncio.Task[None] | None = None
        self.written = 0  # skills the model wrote examples for since start

    @property
    def enabled(self) -> bool:
        """Whether a model is configured to write examples."""
        return self.gateway.configured

    def key(self, skill: Skill) -> str:
        """The content hash of what the examples are written from, with the model's name."""
        profile = self.gateway.node_profile("router")
        model = self.gateway.config.get(profile).model if self.gateway.config else ""
        parts = [model, skill.name, skill.description, *skill.config.triggers, skill.body()]
        return hashlib.sha256("\0".join(parts).encode()).hexdigest()

    def cached(self, keys: list[str]) -> dict[str, tuple[str, ...]]:
        """The examples on disk for each of ``keys`` that has some."""
        if self._db is None or not keys:
            return {}
        with self._lock:
            rows = rows_by_key(self._db, "written", "body", keys)
        return {key: tuple(json.loads(body)) for key, body in rows}

    def _store(self, key: str, examples: tuple[str, ...]) -> None:
        if self._db is None:
            return
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO written VALUES (?, ?)", (key, json.dumps(examples))
            )
            self._db.commit()

    async def write(self, skill: Skill, key: str) -> tuple[str, ...]:
        """Ask the model for ``skill``'s examples and cache them (empty when it fails)."""
        if key in self._tried:
            return ()
        spec = self.prompts.tool(TOOL, most=MOST)
        tool = function_tool(spec["name"], spec["description"], spec["parameters"])
        instructions = await asyncio.to_thread(skill.body)
        system = self.prompts.render(
            "skill_examples",
            skill=skill,
            instructions=instructions[:_INSTRUCTIONS],
            most=MOST,
        )
        try:
            args, _ = await forced_call(
                self.gateway, self.gateway.node_profile("router"), tool, system, skill.name, {}
            )
        except ModelError as exc:
            self._tried.add(key)  # not asked again before a restart
            log.warning("skills.examples_not_written", skill=skill.name, error=str(exc))
            return ()
        raw = args.get("examples")
        texts = [str(t).strip() for t in raw] if isinstance(raw, list) else []
        examples = tuple(dict.fromkeys(t[:300] for t in texts if t))[:MOST]
        if not examples:
            self._tried.add(key)
            return ()
        await asyncio.to_thread(self._store, key, examples)
        self.written += 1
        return examples

    async def fill(
        self, skills: list[Skill], apply: Callable[[dict[str, tuple[str, tuple[str, ...]]]], None]
    ) -> None:
        """Give every skill of ``skills`` that wants examples its cached ones at once, then
        write the missing ones; ``apply`` (run off the event loop) receives
        ``{name: (fingerprint, examples)}``: the cached ones together, then the written ones
        a few at a time (each call re-indexes)."""
        if not self.enabled:
            return
        wanting = [s for s in skills if wants_examples(s)]
        keys = await asyncio.to_thread(lambda: {s.name: self.key(s) for s in wanting})
        cached = await asyncio.to_thread(self.cached, list(keys.values()))
        ready = {
            s.name: (s.fingerprint, cached[keys[s.name]]) for s in wanting if keys[s.name] in cached
        }
        if ready:
            await asyncio.to_thread(apply, ready)
        batch: dict[str, tuple[str, tuple[str, ...]]] = {}
        for skill in wanting:
            key = keys[skill.name]
            if key not in cached and (examples := await self.write(skill, key)):
                batch[skill.name] = (skill.fingerprint, examples)
            if len(batch) >= _BATCH:
                await asyncio.to_thread(apply, batch)
                batch = {}
        if batch:
            await asyncio.to_thread(apply, batch)
        if self.written:
            log.info("skills.examples_written", skills=self.written)

    def refresh(self, service: SkillService) -> None:
        """Start filling ``service``'s skills in the background (a fill under way for an
        earlier version of the folder stops)."""
        if not self.enabled:
            return
        if self._task is not None:
            self._task.cancel()
        self._task = asyncio.create_task(self.fill(service.registry.all(), service.add_written))

    async def aclose(self) -> None:
        """Stop a fill under way."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._db is not None:
            self._db.close()
