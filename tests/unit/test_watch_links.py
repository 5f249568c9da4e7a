"""Live reload of a folder whose entries link elsewhere: a change made while the watcher
starts again (a link came or went) is not lost."""

from __future__ import annotations

import asyncio
from pathlib import Path

from agents.watch import watch_folder


async def test_a_change_made_while_the_watch_starts_again_is_reloaded(tmp_path: Path) -> None:
    # Left yesterday: the watch restarts when a link comes or goes; a file written between
    # the old watch's end and the new one's start was never reloaded.
    folder, elsewhere = tmp_path / "skills", tmp_path / "dev" / "linked"
    folder.mkdir()
    elsewhere.mkdir(parents=True)
    reloads: list[int] = []
    edited = asyncio.Event()

    async def reload() -> None:
        reloads.append(len(reloads))
        if len(reloads) == 1:  # the link's reload: edit the linked folder before it is watched
            (elsewhere / "SKILL.md").write_text("edited")
        elif (elsewhere / "SKILL.md").exists():
            edited.set()

    stop = asyncio.Event()
    task = asyncio.create_task(watch_folder(folder, reload, stop, topic="test"))
    await asyncio.sleep(0.5)  # watching
    (folder / "linked").symlink_to(elsewhere, target_is_directory=True)
    try:
        await asyncio.wait_for(edited.wait(), 5)
    finally:
        stop.set()
        await asyncio.wait_for(task, 5)
