"""A tool name that serves nothing, declared by a skill that did not load: the broken skills'
``skill.yaml`` are read once per reload, not at each call, and a fixed skill is no longer
named."""

from __future__ import annotations

from pathlib import Path

import pytest

from agents.errors import SkillNotFound
from agents.prompts import Prompts
from agents.skills.service import SkillService, SkillsOptions
from agents.toolserver import unloaded
from agents.toolserver.catalogue import ToolCatalogue
from tests.skillkit import tool, write_skill

HANDLER = "def open_case(**values):\n    return values\n"


def desk(root: Path, tool_name: str) -> None:
    """Skill ``desk`` declaring ``tool_name``, whose handler has only ``open_case``."""
    config = {"tools": [tool(tool_name, f"handler:{tool_name}")]}
    write_skill(root / "skills", "desk", config=config, handler=HANDLER)


def refusal(catalogue: ToolCatalogue, name: str) -> str:
    with pytest.raises(SkillNotFound) as refused:
        catalogue.entry(name)
    return refused.value.reason


def test_the_broken_skills_are_read_once_per_reload_and_a_fixed_one_is_not_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    desk(tmp_path, "open_ticket")  # no such function: desk does not load
    service = SkillService(SkillsOptions(tmp_path / "skills", tmp_path / "data", embeddings=False))
    service.reload()
    catalogue = ToolCatalogue(service, Prompts())
    read: list[str] = []
    declared = unloaded.declared_tools

    def counted(folder: Path) -> list[str]:
        read.append(folder.name)
        return declared(folder)

    monkeypatch.setattr(unloaded, "declared_tools", counted)
    for _ in range(3):
        assert refusal(catalogue, "open_ticket").startswith("it belongs to skill 'desk', and ")
        assert refusal(catalogue, "desk__open_ticket").startswith("it belongs to skill 'desk'")
        assert refusal(catalogue, "get_tickets") == ""
    assert read == ["desk"]

    desk(tmp_path, "open_case")  # fixed, under another tool name
    service.reload()
    assert catalogue.entry("open_case").kind == "skill"
    assert refusal(catalogue, "open_ticket") == ""
    assert read == ["desk"]  # no skill is broken now: none read

    desk(tmp_path, "close_ticket")  # broken again, declaring another name
    service.reload()
    assert refusal(catalogue, "open_ticket") == ""
    assert refusal(catalogue, "close_ticket").startswith("it belongs to skill 'desk'")
    assert read == ["desk", "desk"]  # read again after the reload, once
