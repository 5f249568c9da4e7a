"""Why a tool name serves nothing when a skill folder that did not load declares it: a caller
of that tool is told the skill and its error, as ``load_skill`` tells it, not "no tool"."""

from __future__ import annotations

from pathlib import Path

from agents import yamlsafe
from agents.skills.loader import CONFIG_FILE
from agents.skills.registry import SkillRegistry


def declared_tools(folder: Path) -> list[str]:
    """The tool names ``folder``'s ``skill.yaml`` declares, as far as it can be read (none
    when it is no YAML mapping of tools)."""
    try:
        data = yamlsafe.load((folder / CONFIG_FILE).read_text(encoding="utf-8"), cycles=True)
    except Exception:  # unreadable, not UTF-8, not YAML, refused: it declares nothing known
        return []
    tools = data.get("tools") if isinstance(data, dict) else None
    if not isinstance(tools, list):
        return []
    return [t["name"] for t in tools if isinstance(t, dict) and isinstance(t.get("name"), str)]


def not_loaded_tool(registry: SkillRegistry, name: str) -> str:
    """Why tool ``name`` (its own name, or ``<skill>__<tool>``) does not serve, when a skill
    with load errors declares it: the skill and its problems; else ""."""
    for skill in dict.fromkeys(p.skill for p in registry.errors):
        tools = declared_tools(registry.directory / skill)
        if name in tools or any(name == f"{skill}__{tool}" for tool in tools):
            why = registry.not_loaded(skill) or "it is not serving"
            return f"it belongs to skill {skill!r}, and {why}"
    return ""
