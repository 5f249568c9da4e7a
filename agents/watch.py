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
    ``stop`` is set. ``reload`` logs the problems it finds (once each: the registries know
    which are new), so they are not logged here again. The folder must exist
    (``start_watching`` creates it).

    An entry of ``directory`` that is a link to a folder elsewhere (a skill developed in its
    own repository, linked in) is watched where it leads: the file system tells changes
    where they happen, not through the links to them."""
    log.info(f"{topic}.watching", directory=str(directory))
    again = False  # watched anew: what changed in between is reloaded once the watch runs
    while not stop.is_set():
        linked = linked_folders(directory) if recursive else []
        try:
            await _watch(directory, linked, reload, stop, topic, recursive, accept, again)
        except Exception:  # a linked folder removed while watched, say: watched anew
            log.warning(f"{topic}.watch_failed", exc_info=True)
            await asyncio.sleep(1.0)
        again = True


async def _watch(
    directory: Path,
    linked: list[Path],
    reload: Callable[[], Awaitable[Any]],
    stop: asyncio.Event,
    topic: str,
    recursive: bool,
    accept: Callable[[str], bool] | None,
    catch_up: bool = False,
) -> None:
    """``watch_folder``'s watch of ``directory`` and ``linked``, until ``stop``, or until a
    link of ``directory`` came or went. ``catch_up``: reload once the watch runs (its first
    empty wait says it does), for the changes made before it did."""
    async for changes in awatch(
        directory,
        *linked,
        stop_event=stop,
        debounce=300,
        step=100,
        recursive=recursive,
        ignore_permission_denied=True,
        rust_timeout=500 if catch_up else None,
        yield_on_timeout=catch_up,
    ):
        if catch_up:  # the first wait of a watch started again, whatever it brought
            catch_up = False
        elif not any(accept is None or accept(path) for _, path in changes):
            continue  # nothing changed for a while, or nothing reloading takes
        try:
            await reload()
        except Exception:  # a reload bug must not end live reload
            log.exception(f"{topic}.reload_failed")
            continue
        if recursive and linked_folders(directory) != linked:
            return  # a link came or went: watched anew


def linked_folders(directory: Path) -> list[Path]:
    """Where the entries of ``directory`` that link to folders outside it lead."""
    found = set()
    with contextlib.suppress(OSError):
        for entry in directory.iterdir():
            if entry.is_symlink() and entry.is_dir():
                target = entry.resolve()
                if not target.is_relative_to(directory.resolve()):
                    found.add(target)
    return sorted(found)


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
