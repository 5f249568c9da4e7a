"""The three tiers as tools a caller reaches: search the index, load a definition, read a
reference, call a skill's tool.

One module for every caller that walks the tiers, the experts' tool loop and the tool server
alike, so scope rules and the text a model reads are the same everywhere.
"""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agents.echo import cut, cut_in, few
from agents.errors import SkillNotFound, SkillReferenceError
from agents.models.structured import function_tool
from agents.prompts import Prompts
from agents.skills.index import brief
from agents.skills.loader import REFERENCE_DIRS, Skill
from agents.skills.results import ToolResult
from agents.skills.service import SkillService
from agents.skills.spec import ToolSpec

MAX_REFERENCE_CHARS = 20_000

LOAD_SKILL = "load_skill"
READ_REFERENCE = "read_skill_reference"
SEARCH_SKILLS = "search_skills"
NOTE_SKILL = "note_skill"
META_TOOLS = (LOAD_SKILL, READ_REFERENCE, SEARCH_SKILLS, NOTE_SKILL)

# What a call comes to when it is decided without running a handler: (text, ok).
Outcome = tuple[str, bool]


@dataclass
class Scope:
    """What a caller may reach: loaded skills' tools, and which skills ``load_skill`` may add.

    Attributes:
        loaded: Skills whose tools are bound (grows when ``load_skill`` succeeds).
        loadable: Skills ``load_skill`` may add; ``None`` means any installed skill.
        notable: Skills the model may name with ``note_skill`` beside its answer (the ones
            it chooses among); empty: the tool is not offered.
    """

    loaded: list[str] = field(default_factory=list)
    loadable: set[str] | None = None
    notable: tuple[str, ...] = ()

    def may_load(self, name: str) -> bool:
        """Whether ``load_skill(name)`` is within this scope."""
        return self.loadable is None or name in self.loadable


def openai_tool(spec: ToolSpec) -> dict[str, Any]:
    """A skill's tool as OpenAI's function-calling definition."""
    return function_tool(spec.name, spec.description, spec.parameters)


def definition(skill: Skill) -> dict[str, Any]:
    """A skill's definition as data: instructions, tools' schemas and the references' paths."""
    return {
        "name": skill.name,
        "description": skill.description,
        "brief": brief(skill.description),
        "instructions": skill.body(),
        "tools": [openai_tool(t) for t in skill.tools],
        "references": list(skill.references),
        "instruction_only": skill.instruction_only,
    }


def definition_view(skill: Skill) -> dict[str, Any]:
    """What a prompt template shows of a skill whose definition it holds."""
    return {
        "name": skill.name,
        "description": skill.description,
        "brief": brief(skill.description),
        "instructions": skill.body(),
        "references": list(skill.references),
        "tools": [t.name for t in skill.tools],
    }


def read_reference(skill: Skill, path: str, limit: int = MAX_REFERENCE_CHARS) -> str:
    """One reference document of a skill; the path is confined to the skill's folder.

    Raises:
        SkillReferenceError: for a path outside the folder (``outside``), one that names
            nothing there, or one the file system does not take (a NUL byte, a name too
            long); its message names a few of the skill's references.
    """
    shown = repr(cut(path))
    relative = Path(path.strip().lstrip("/"))
    if relative.parts and relative.parts[0] not in REFERENCE_DIRS:
        relative = Path(REFERENCE_DIRS[0]) / relative
    root = skill.path.resolve()
    try:
        target = (root / relative).resolve()
        if not target.is_relative_to(root) or ".." in relative.parts:
            raise _unreadable(skill, f"{shown} is outside skill {skill.name!r}", outside=True)
        if not target.is_file():
            raise _unreadable(skill, f"skill {skill.name!r} has no reference {shown}")
        text = target.read_text(encoding="utf-8", errors="replace")
    except (ValueError, OSError) as exc:  # a NUL byte, a loop of links, a name too long...
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise _unreadable(skill, f"{shown} is not a usable path ({why})") from None
    if len(text) > limit:
        text = text[:limit] + f"…[truncated {len(text) - limit} characters]"
    return text


def _unreadable(skill: Skill, reason: str, *, outside: bool = False) -> SkillReferenceError:
    listed = [repr(r) for r in skill.references]
    there = f"its references are {few(listed)}" if listed else "it has no references"
    return SkillReferenceError(f"{reason}; {there}", reason=reason, outside=outside)


def meta_tools(
    prompts: Prompts, names: tuple[str, ...] = (LOAD_SKILL, READ_REFERENCE)
) -> list[dict[str, Any]]:
    """OpenAI definitions of the meta-tools ``names`` (from ``prompts/tools/``)."""
    return [_as_function(prompts.tool(name)) for name in names]


class SkillTools:
    """The tiers of one skills folder as function-calling tools, within a caller's scope.

    Args:
        skills: The skills folder's registry, index and runner.
        prompts: Where the meta-tools' definitions and the definition text come from.
    """

    def __init__(self, skills: SkillService, prompts: Prompts) -> None:
        self.skills = skills
        self.prompts = prompts

    def definitions(self, scope: Scope) -> list[dict[str, Any]]:
        """The tools a model in ``scope`` is offered: the meta-tools and the loaded skills'."""
        registry = self.skills.registry
        if not len(registry):
            return []
        tools = meta_tools(self.prompts)
        if scope.notable:
            tools.append(_as_function(self.prompts.tool(NOTE_SKILL, skills=list(scope.notable))))
        for name in scope.loaded:
            if name in registry:
                tools.extend(openai_tool(t) for t in registry.get(name).tools)
        return tools

    def render_definition(self, skill: Skill) -> str:
        """The definition as the text a model reads (what ``load_skill`` returns)."""
        return self.prompts.render(
            "skill_definition",
            skill=skill,
            instructions=skill.body(),
            tools=[t.name for t in skill.tools],
            references=list(skill.references),
        )

    def decide(self, scope: Scope, name: str, args: dict[str, Any]) -> Outcome | None:
        """A call's outcome when it is decided here (a meta-tool, a refusal), else ``None``:
        the call goes to the skill's handler."""
        if name == LOAD_SKILL:
            return self._load(scope, str(args.get("name", "")).strip())
        if name == READ_REFERENCE:
            return self._read(scope, str(args.get("name", "")), str(args.get("path", "")))
        if name == NOTE_SKILL and scope.notable:
            noted = str(args.get("name", ""))
            if noted in scope.notable:
                return "noted", True
            return f"error (unknown_skill): note one of {list(scope.notable)}", False
        try:
            owner, _ = self.skills.registry.tool(name)
        except SkillNotFound as exc:
            return f"error (unknown_tool): {cut_in(str(exc), name)}", False
        if owner.name in scope.loaded:
            return None
        # Only tools of skills this conversation (or task) loaded are callable: a tool name
        # planted in some text cannot widen what the model may do.
        if not scope.may_load(owner.name):
            return f"error (out_of_scope): {name} is not available for this task", False
        return (
            f"error (skill_not_loaded): {name} belongs to skill {owner.name!r}; call "
            f"load_skill with name {owner.name!r} first"
        ), False

    def call(
        self,
        scope: Scope,
        name: str,
        args: dict[str, Any],
        **context: Any,
    ) -> Outcome | Awaitable[Outcome]:
        """The outcome of one call within ``scope``: decided at once, or the handler's run to
        await (``context``: thread_id, run_id, call_id, as ``ToolRunner.call`` takes them)."""
        decided = self.decide(scope, name, args)
        return decided if decided is not None else self._run(name, args, context)

    async def _run(self, name: str, args: dict[str, Any], context: dict[str, Any]) -> Outcome:
        result: ToolResult = await self.skills.call(name, args, **context)
        return result.content, result.ok

    def _load(self, scope: Scope, skill_name: str) -> Outcome:
        if skill_name in scope.loaded:
            return (
                f"Skill {skill_name!r} is already loaded in this conversation; its "
                "instructions are above and its tools are available."
            ), True
        try:  # one no longer installed is said to be so, whatever the task's scope
            skill = self.skills.registry.get(skill_name)
        except SkillNotFound as exc:
            return f"error (unknown_skill): {cut_in(str(exc), skill_name)}", False
        if not scope.may_load(skill_name):
            return (
                f"error (out_of_scope): skill {skill_name!r} is not part of this task; "
                "work with the tools you have"
            ), False
        scope.loaded.append(skill_name)
        return self.render_definition(skill), True

    def _read(self, scope: Scope, skill_name: str, path: str) -> Outcome:
        if skill_name not in scope.loaded:
            return (
                f"error (skill_not_loaded): load skill {cut(skill_name)!r} with load_skill first",
                False,
            )
        try:
            return read_reference(self.skills.registry.get(skill_name), path), True
        except (SkillNotFound, SkillReferenceError) as exc:
            return f"error (bad_reference): {cut_in(str(exc), skill_name, path)}", False


def _as_function(tool: dict[str, Any]) -> dict[str, Any]:
    return function_tool(str(tool["name"]), str(tool["description"]), tool["parameters"])
