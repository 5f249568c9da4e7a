"""Tier 2: a skill's full definition and references, fetched on demand by function calling."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agents.models.structured import function_tool
from agents.skills.loader import REFERENCE_DIRS, Skill
from agents.skills.spec import ToolSpec

MAX_REFERENCE_CHARS = 20_000

LOAD_SKILL = "load_skill"
READ_REFERENCE = "read_skill_reference"
SEARCH_SKILLS = "search_skills"
META_TOOLS = (LOAD_SKILL, READ_REFERENCE, SEARCH_SKILLS)


def openai_tool(spec: ToolSpec) -> dict[str, Any]:
    """A tool as OpenAI's function-calling definition."""
    return function_tool(spec.name, spec.description, spec.parameters)


def definition(skill: Skill) -> dict[str, Any]:
    """What ``load_skill`` returns: instructions, tools' schemas and the references' paths."""
    return {
        "name": skill.name,
        "description": skill.description,
        "instructions": skill.body(),
        "tools": [openai_tool(t) for t in skill.tools],
        "references": list(skill.references),
        "instruction_only": skill.instruction_only,
    }


def render_definition(skill: Skill) -> str:
    """The definition as the text a model reads."""
    parts = [f"# Skill: {skill.name}", skill.description, "", skill.body()]
    if skill.tools:
        parts += ["", "Tools now available: " + ", ".join(t.name for t in skill.tools)]
    if skill.references:
        parts += ["", f"References (read with {READ_REFERENCE}): " + ", ".join(skill.references)]
    return "\n".join(parts).strip()


class SkillReferenceError(ValueError):
    """A reference path outside the skill's folder, or one that does not exist."""


def read_reference(skill: Skill, path: str, limit: int = MAX_REFERENCE_CHARS) -> str:
    """One reference document of a skill; the path is confined to the skill's folder."""
    relative = Path(path.strip().lstrip("/"))
    if relative.parts and relative.parts[0] not in REFERENCE_DIRS:
        relative = Path(REFERENCE_DIRS[0]) / relative
    root = skill.path.resolve()
    try:
        target = (root / relative).resolve()
    except (ValueError, OSError) as exc:  # a NUL byte, a loop of links...
        raise SkillReferenceError(f"{path!r} is not a usable path: {exc}") from None
    if not target.is_relative_to(root) or ".." in relative.parts:
        raise SkillReferenceError(
            f"{path!r} is outside skill {skill.name!r}; use one of {list(skill.references)}"
        )
    if not target.is_file():
        raise SkillReferenceError(
            f"skill {skill.name!r} has no reference {path!r}; it has {list(skill.references)}"
        )
    try:
        text = target.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise SkillReferenceError(f"reference {path!r} cannot be read: {exc}") from None
    if len(text) > limit:
        text = text[:limit] + f"…[truncated {len(text) - limit} characters]"
    return text


def meta_tool_definitions(names: tuple[str, ...] = (LOAD_SKILL, READ_REFERENCE)) -> list[Any]:
    """OpenAI definitions of the meta-tools that walk the tiers."""
    tools: dict[str, dict[str, Any]] = {
        LOAD_SKILL: {
            "name": LOAD_SKILL,
            "description": "Load a skill's full instructions and tools by name (from the skill "
            "index). Call it before using a skill; its tools become available afterwards.",
            "parameters": {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "description": "Skill name from the index."}
                },
                "required": ["name"],
                "additionalProperties": False,
            },
        },
        READ_REFERENCE: {
            "name": READ_REFERENCE,
            "description": "Read one reference document of a loaded skill.",
            "parameters": {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "description": "Skill name."},
                    "path": {"type": "string", "description": "Path as listed by load_skill."},
                },
                "required": ["name", "path"],
                "additionalProperties": False,
            },
        },
        SEARCH_SKILLS: {
            "name": SEARCH_SKILLS,
            "description": "Search the installed skills by what you need to do.",
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string"},
                    "k": {"type": "integer", "minimum": 1, "maximum": 20, "default": 5},
                },
                "required": ["query"],
                "additionalProperties": False,
            },
        },
    }
    return [
        function_tool(str(tools[n]["name"]), str(tools[n]["description"]), tools[n]["parameters"])
        for n in names
    ]
