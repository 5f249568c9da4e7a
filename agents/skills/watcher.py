"""Live reload: watch the skills folder and reload what changed, within a second or two."""

from __future__ import annotations

import asyncio
import contextlib

import structlog
from watchfiles import awatch

from agents.skills.service import SkillService

log = structlog.get_logger(__name__)


async def watch_skills(service: SkillService, stop: asyncio.Event) -> None:
    """Reload ``service`` whenever its folder changes, until ``stop`` is set."""
    directory = service.options.directory
    directory.mkdir(parents=True, exist_ok=True)
    log.info("skills.watching", directory=str(directory))
    async for changes in awatch(
        directory,
        stop_event=stop,
        debounce=300,
        step=100,
        recursive=True,
        ignore_permission_denied=True,
    ):
        paths = {p for _, p in changes if "__pycache__" not in p}
        if not paths:
            continue
        try:
            report = await service.areload()
        except Exception:  # a reload bug must not end live reload
            log.exception("skills.reload_failed")
            continue
        for problem in report.errors:
            log.warning("skills.reload_error", error=str(problem))


def start_watcher(service: SkillService) -> tuple[asyncio.Task[None], asyncio.Event]:
    """Start watching in the background; set the returned event to stop."""
    stop = asyncio.Event()
    task = asyncio.create_task(watch_skills(service, stop), name="skills-watcher")
    return task, stop


async def stop_watcher(task: asyncio.Task[None], stop: asyncio.Event) -> None:
    """Stop the watcher started by ``start_watcher``."""
    stop.set()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await asyncio.wait_for(task, 5)
