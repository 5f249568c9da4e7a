"""The bundled skills' folders and handlers, for the tests that check them."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

from agents.skills.context import ToolContext
from agents.skills.spec import SkillConfig

SKILLS = Path(__file__).resolve().parents[1] / "skills"
SKILL_DIRS = sorted(p for p in SKILLS.iterdir() if (p / "SKILL.md").is_file())
_modules: dict[str, ModuleType] = {}


def handler(skill: str, module: str = "handler") -> ModuleType:
    """Import ``skills/<skill>/<module>.py`` by path, once, under a unique module name."""
    name = f"skill_test_{skill.replace('-', '_')}_{module.replace('.', '_')}"
    if name not in _modules:
        path = SKILLS / skill / (module.replace(".", "/") + ".py")
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None
        assert spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
        _modules[name] = mod
    return _modules[name]


def ctx(skill: str, tmp_path: Path, key: str = "key-1", tool: str = "tool") -> ToolContext:
    return ToolContext(
        skill=skill,
        tool=tool,
        skill_dir=SKILLS / skill,
        data_dir=tmp_path / skill,
        idempotency_key=key,
        thread_id="thread-1",
        run_id="run-1",
    )


def frontmatter(skill_dir: Path) -> tuple[dict[str, Any], str]:
    text = (skill_dir / "SKILL.md").read_text(encoding="utf-8")
    assert text.startswith("---\n"), f"{skill_dir.name}: SKILL.md must open with ---"
    head, _, body = text[4:].partition("\n---\n")
    return yaml.safe_load(head), body


def config(skill_dir: Path) -> SkillConfig:
    path = skill_dir / "skill.yaml"
    if not path.exists():
        return SkillConfig()
    return SkillConfig.model_validate(yaml.safe_load(path.read_text(encoding="utf-8")) or {})


def work_orders(result: Any) -> list[dict[str, Any]]:
    """The work orders in a ``list_work_orders`` result (a list, a dict holding one, or JSON)."""
    if isinstance(result, dict):
        for value in result.values():
            if isinstance(value, list):
                return value
    return list(result) if isinstance(result, list) else list(json.loads(result))
