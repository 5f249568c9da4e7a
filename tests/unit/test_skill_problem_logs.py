"""A broken skill is logged once per change of its folder: not again at every reload, not once
per tool, not once more by the folder's watcher."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

from structlog.testing import capture_logs

from agents.skills.registry import SkillRegistry
from agents.watch import watch_folder
from tests.skillkit import tool, write_skill


def invalid(logs: list[MutableMapping[str, Any]]) -> list[tuple[str, str]]:
    return [(e["skill"], e["error"]) for e in logs if e["event"] == "skill.invalid"]


def test_a_broken_skill_is_logged_again_only_when_its_folder_changes(tmp_path: Path) -> None:
    skills = tmp_path / "skills"
    write_skill(skills, "good", config={"tools": [tool("fine", "handler:fine")]}, handler="")
    (skills / "good" / "handler.py").write_text("def fine():\n    return 1\n")
    broken = write_skill(skills, "broken", config={"tools": [tool("gone", "handler:gone")]})
    registry = SkillRegistry(skills)
    with capture_logs() as logs:
        registry.reload()
    assert [skill for skill, _ in invalid(logs)] == ["broken"], logs
    with capture_logs() as logs:
        registry.reload()  # nothing changed
        (skills / "good" / "SKILL.md").write_text(
            (skills / "good" / "SKILL.md").read_text() + "\nMore.\n"
        )
        registry.reload()  # another skill changed
    assert invalid(logs) == []
    assert [p.skill for p in registry.errors] == ["broken"]  # still known, still said by get
    with capture_logs() as logs:
        (broken / "SKILL.md").write_text((broken / "SKILL.md").read_text() + "\nEdited.\n")
        registry.reload()  # its folder changed, still broken: said again, once
    assert [skill for skill, _ in invalid(logs)] == ["broken"], logs


def test_a_duplicate_tool_name_is_logged_once_while_nothing_changes(tmp_path: Path) -> None:
    skills = tmp_path / "skills"
    for name in ("first", "second"):
        write_skill(skills, name, config={"tools": [tool("same", "handler:same")]}, handler="")
        (skills / name / "handler.py").write_text("def same():\n    return 1\n")
    registry = SkillRegistry(skills)
    with capture_logs() as logs:
        registry.reload()
        registry.reload()
        registry.reload()
    [(_, error)] = invalid(logs)
    assert "'same' is already defined" in error, error


def test_a_handler_module_that_does_not_parse_is_one_problem_not_one_per_tool(
    tmp_path: Path,
) -> None:
    skills = tmp_path / "skills"
    names = [f"tool_{n}" for n in range(6)]
    write_skill(
        skills,
        "typo",
        config={"tools": [tool(name, f"handler:{name}") for name in names]},
        handler="def tool_0(:\n    return 1\n",
    )
    registry = SkillRegistry(skills)
    with capture_logs() as logs:
        registry.reload()
    [(skill, error)] = invalid(logs)
    assert skill == "typo"
    assert "handler.py does not parse" in error, error
    assert len(registry.errors) == 1, registry.errors


async def test_the_watcher_does_not_log_again_what_a_reload_logged(tmp_path: Path) -> None:
    # Each problem was logged twice per reload: as skill.invalid by the registry, and as
    # skills.reload_error by the watcher from the report.
    skills = tmp_path / "skills"
    write_skill(skills, "broken", config={"tools": [tool("gone", "handler:gone")]})
    registry = SkillRegistry(skills)
    reloaded = asyncio.Event()

    async def reload() -> Any:
        report = await asyncio.to_thread(registry.reload)
        reloaded.set()
        return report

    stop = asyncio.Event()
    with capture_logs() as logs:
        task = asyncio.create_task(watch_folder(skills, reload, stop, topic="skills"))
        try:
            for n in range(50):  # until a watch runs and reloads
                (skills / f"_probe-{n}").write_text("probe")
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(reloaded.wait(), 0.3)
                    break
            assert reloaded.is_set()
        finally:
            stop.set()
            await asyncio.wait_for(task, 5)
    assert len(invalid(logs)) == 1, logs
    assert not [e for e in logs if e["event"].endswith("reload_error")], logs
