"""Why a tool name serves nothing when a skill folder that did not load declares it: a caller
of that tool is told the skill and its error, as ``load_skill`` tells it, not "no tool"."""

from __future__ import annotations

from pathlib import Path

from agents import yamlsafe
from agents.errors import SkillProblem
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


class UnloadedTools:
    """The tool names the skills with load errors declare (their own names, and
    ``<skill>__<tool>``), each with its skill: read from their ``skill.yaml`` once per reload
    of ``registry``, not at each call of a name that serves nothing.

    The registry's ``errors`` is a new list at every reload, so the list the map was read
    for tells whether it is current.
    """

    def __init__(self, registry: SkillRegistry) -> None:
        self.registry = registry
        self._read: tuple[list[SkillProblem], dict[str, str]] | None = None

    def why(self, name: str) -> str:
        """Why tool ``name`` does not serve, when a skill with load errors declares it: the
        skill and its problems; else ""."""
        skill = self.declared().get(name)
        if skill is None:
            return ""
        why = self.registry.not_loaded(skill) or "it is not serving"
        return f"it belongs to skill {skill!r}, and {why}"

    def declared(self) -> dict[str, str]:
        """Each tool name a skill with load errors declares, to that skill (the first that
        declares it, in the order of the errors)."""
        errors = self.registry.errors
        if self._read is None or self._read[0] is not errors:
            self._read = (errors, _declared_by(self.registry, errors))
        return self._read[1]


def _declared_by(registry: SkillRegistry, errors: list[SkillProblem]) -> dict[str, str]:
    extra = {p.name: p for p in registry.extra}
    names: dict[str, str] = {}
    for skill in dict.fromkeys(p.skill for p in errors):
        for tool in declared_tools(extra.get(skill, registry.directory / skill)):
            names.setdefault(tool, skill)
            names.setdefault(f"{skill}__{tool}", skill)
    return names
