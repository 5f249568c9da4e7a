"""The bundled skills' folders are valid: frontmatter, skill.yaml, handler references."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from agents.skills.spec import Frontmatter
from tests.bundledkit import SKILL_DIRS, SKILLS, config, frontmatter, handler

# --- the folders --------------------------------------------------------------------------


def test_every_bundled_skill_is_here() -> None:
    names = {p.name for p in SKILL_DIRS}
    assert {
        "order-query",
        "inventory",
        "device-alarms",
        "sensor-readings",
        "maintenance-kb",
        "work-order",
        "text-to-speech",
        "returns-policy",
        "escalate-to-human",
    } <= names


@pytest.mark.parametrize("skill_dir", SKILL_DIRS, ids=lambda p: p.name)
def test_frontmatter_parses_and_names_the_folder(skill_dir: Path) -> None:
    raw, body = frontmatter(skill_dir)
    meta = Frontmatter.model_validate(raw)
    assert meta.name == skill_dir.name
    assert len(meta.description) <= 1024
    assert body.strip(), "SKILL.md needs instructions after the frontmatter"


@pytest.mark.parametrize("skill_dir", SKILL_DIRS, ids=lambda p: p.name)
def test_skill_yaml_parses_with_triggers_and_examples(skill_dir: Path) -> None:
    cfg = config(skill_dir)
    assert cfg.triggers, "give the router some trigger keywords"
    assert any(any("\u4e00" <= ch <= "\u9fff" for ch in t) for t in cfg.triggers)
    assert 3 <= len(cfg.examples) <= 6


@pytest.mark.parametrize("skill_dir", SKILL_DIRS, ids=lambda p: p.name)
def test_every_handler_reference_resolves_to_a_function(skill_dir: Path) -> None:
    tools = config(skill_dir).tools
    # A handler.py with no tool naming it is dead code; tools without one cannot run.
    assert bool(tools) == (skill_dir / "handler.py").is_file(), skill_dir.name
    for tool in tools:
        module, _, function = tool.handler.partition(":")
        fn = getattr(handler(skill_dir.name, module), function, None)
        assert callable(fn), f"{skill_dir.name}: {tool.handler} is not a function"
        params = inspect.signature(fn).parameters
        declared = set(tool.parameters.get("properties", {}))
        assert declared <= set(params), f"{tool.name}: {declared - set(params)} not accepted"
        for name in tool.parameters.get("required", []):
            assert name in params
        assert tool.parameters.get("additionalProperties") is False, tool.name


def test_tool_names_are_unique_across_all_skills() -> None:
    seen: dict[str, str] = {}
    for skill_dir in SKILL_DIRS:
        for tool in config(skill_dir).tools:
            assert tool.name not in seen, f"{tool.name} in {seen.get(tool.name)} and {skill_dir}"
            seen[tool.name] = skill_dir.name
    assert len(seen) >= 12


def test_instruction_only_and_pinned_skills() -> None:
    returns = SKILLS / "returns-policy"
    assert not (returns / "handler.py").exists()
    assert config(returns).tools == ()
    assert len(list((returns / "references").glob("*.md"))) >= 3
    assert config(SKILLS / "escalate-to-human").pinned is True
    assert config(SKILLS / "work-order").tools[0].side_effects is True
