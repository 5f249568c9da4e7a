"""Live reload: watch a folder and run a reload whenever it changes, within a second or two.

The skills folder and the workflows folder are both watched this way.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import structlog
from watchfiles import awatch

log = structlog.get_logger(__name__)

Watcher = tuple[asyncio.Task[None], asyncio.Event]


async def watch_folder(
    directory: Path,
    reload: Callable[[], Awaitable[Any]],
    stop: asyncio.Event,
    *,
    topic: str,
    recursive: bool = True,
    accept: Callable[[str], bool] | None = None,
) -> None:
    """Run ``reload`` whenever a file ``accept`` takes changes under ``directory``, until
    ``stop`` is set. The report ``reload`` returns has its new ``errors`` logged. The
    folder must exist (``start_watching`` creates it)."""
    log.info(f"{topic}.watching", directory=str(directory))
    async for changes in awatch(
        directory,
        stop_event=stop,
        debounce=300,
        step=100,
        recursive=recursive,
        ignore_permission_denied=True,
    ):
        if not any(accept is None or accept(path) for _, path in changes):
            continue
        try:
            report = await reload()
        except Exception:  # a reload bug must not end live reload
            log.exception(f"{topic}.reload_failed")
            continue
        for problem in getattr(report, "errors", ()):
            log.warning(f"{topic}.reload_error", error=str(problem))


def start_watching(
    directory: Path,
    reload: Callable[[], Awaitable[Any]],
    *,
    topic: str,
    recursive: bool = True,
    accept: Callable[[str], bool] | None = None,
) -> Watcher:
    """Start ``watch_folder`` in the background (creating the folder if need be);
    ``stop_watching`` ends it."""
    directory.mkdir(parents=True, exist_ok=True)
    stop = asyncio.Event()
    task = asyncio.create_task(
        watch_folder(directory, reload, stop, topic=topic, recursive=recursive, accept=accept),
        name=f"{topic}-watcher",
    )
    return task, stop


async def stop_watching(task: asyncio.Task[None], stop: asyncio.Event) -> None:
    """Stop a watcher started by ``start_watching``."""
    stop.set()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await asyncio.wait_for(task, 5)
