"""Live reload: watch the skills folder and reload what changed, within a second or two."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from agents.skills.registry import ReloadReport
from agents.skills.service import SkillService
from agents.watch import Watcher, start_watching, stop_watching, watch_folder


def _not_cache(path: str) -> bool:
    return "__pycache__" not in path


async def watch_skills(service: SkillService, stop: asyncio.Event) -> None:
    """Reload ``service`` whenever its folder changes, until ``stop`` is set."""
    await asyncio.to_thread(service.options.directory.mkdir, parents=True, exist_ok=True)
    await watch_folder(
        service.options.directory, service.areload, stop, topic="skills", accept=_not_cache
    )


def start_watcher(
    service: SkillService, after: Callable[[ReloadReport], object] | None = None
) -> Watcher:
    """Start watching in the background; ``stop_watcher`` ends it. ``after`` sees each
    reload's report (to re-check the workflows that name skills and tools, say)."""

    async def reload() -> ReloadReport:
        report = await service.areload()
        if after is not None:
            after(report)
        return report

    return start_watching(service.options.directory, reload, topic="skills", accept=_not_cache)


stop_watcher = stop_watching
