"""Live reload of a folder whose entries link elsewhere: a change made while the watcher
starts again (a link came or went) is not lost."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

from agents.watch import watch_folder


async def test_a_change_made_while_the_watch_starts_again_is_reloaded(tmp_path: Path) -> None:
    # Left yesterday: the watch restarts when a link comes or goes; a file written between
    # the old watch's end and the new one's start was never reloaded.
    folder, elsewhere = tmp_path / "skills", tmp_path / "dev" / "linked"
    folder.mkdir()
    elsewhere.mkdir(parents=True)
    watching, edited = asyncio.Event(), asyncio.Event()

    async def reload() -> None:
        if not (folder / "linked").exists():
            watching.set()  # the probe's reload: the first watch runs
        elif not (elsewhere / "SKILL.md").exists():  # the link's: edited before it is watched
            (elsewhere / "SKILL.md").write_text("edited")
        else:
            edited.set()

    stop = asyncio.Event()
    task = asyncio.create_task(watch_folder(folder, reload, stop, topic="test"))
    for n in range(50):  # until the first watch runs
        (folder / f"probe-{n}").write_text("probe")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(watching.wait(), 0.2)
            break
    (folder / "linked").symlink_to(elsewhere, target_is_directory=True)
    try:
        await asyncio.wait_for(edited.wait(), 5)
    finally:
        stop.set()
        await asyncio.wait_for(task, 5)
