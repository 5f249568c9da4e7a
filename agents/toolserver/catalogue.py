"""Every tool the tool server offers, one catalogue behind MCP and the OpenAI-style tools.

The meta-tools (``search_skills``, ``load_skill``, ``call_skill_tool``) walk the three tiers,
so a caller holding three tools reaches every skill (``read_skill_reference`` reads a skill's
reference documents, for callers that cannot read MCP resources); each skill tool is offered
under a safe name too; workflows are ``run_workflow`` and ``get_workflow_run``. A skill
tool's call, direct or through ``call_skill_tool``, goes through the skills' ToolRunner: the
same validation, timeouts, trimming and idempotency as inside the service, and its result
is checked against the tool's ``output_schema`` here, whichever path it took.
"""

from __future__ import annotations

import hashlib
import re
import time
from dataclasses import dataclass, replace
from typing import Any, Literal

from agents.echo import cut, cut_in, not_an_object
from agents.errors import SchemaUnusable, SkillNotFound, SkillReferenceError
from agents.prompts import Prompts
from agents.skills.arguments import parse_arguments
from agents.skills.loader import Skill
from agents.skills.meta import read_reference
from agents.skills.results import ToolResult, tool_error
from agents.skills.service import SkillService
from agents.skills.spec import RESERVED_TOOL_NAMES, ToolSpec
from agents.toolserver.results import checked, ok_result
from agents.toolserver.runs import WorkflowTools
from agents.toolserver.strict import loosen, strict_schema
from agents.toolserver.unloaded import UnloadedTools

SEARCH_SKILLS, LOAD_SKILL, CALL_SKILL_TOOL = "search_skills", "load_skill", "call_skill_tool"
READ_REFERENCE = "read_skill_reference"
META_TOOLS = (SEARCH_SKILLS, LOAD_SKILL, CALL_SKILL_TOOL, READ_REFERENCE)
RESERVED = RESERVED_TOOL_NAMES  # a skill's tool of such a name does not load
NAME_PATTERN = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
SUMMARY_CHARS = 50
AUTO_LIST_LIMIT = 50  # skill tools listed one by one while there are fewer than this


@dataclass(frozen=True)
class ToolEntry:
    """One tool as callers see it.

    Attributes:
        name: The name callers use (matches ``NAME_PATTERN``, unique in the catalogue).
        kind: ``meta`` (the tiers), ``skill`` (a skill's own tool) or ``workflow``.
        skill, tool: For a skill tool, its skill and its name in ``skill.yaml``.
        read_only: Whether it changes nothing (MCP's readOnlyHint); None: not said.
    """

    name: str
    description: str
    parameters: dict[str, Any]
    kind: Literal["meta", "skill", "workflow"]
    read_only: bool | None = False
    destructive: bool | None = None
    idempotent: bool | None = None
    output_schema: dict[str, Any] | None = None
    skill: str | None = None
    tool: str | None = None

    def openai(self, *, strict: bool = True) -> dict[str, Any]:
        """The OpenAI function definition; ``strict``: its strict-mode variant."""
        parameters = strict_schema(self.parameters) if strict else self.parameters
        function: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "parameters": parameters,
        }
        if strict:
            function["strict"] = True
        return {"type": "function", "function": function}


def public_name(skill: str, tool: str, taken: set[str]) -> str:
    """The name a skill's tool is offered under: its own, unless a meta-tool or another tool
    has it; then ``<skill>__<tool>``, cut to 64 characters with a hash when longer (the
    same folder always gets the same name)."""
    if tool not in RESERVED and tool not in taken:
        return tool
    name = f"{skill}__{tool}"
    if len(name) > 64 or name in taken or name in RESERVED:
        digest = hashlib.sha256(f"{skill}/{tool}".encode()).hexdigest()[:8]
        name = f"{name[:55]}_{digest}"
    return name


def summary(description: str, width: int = SUMMARY_CHARS) -> str:
    """A description's first sentence in at most ``width`` characters."""
    first = " ".join(description.split(". ")[0].split()).rstrip(".")
    return first if len(first) <= width else first[: width - 1].rstrip() + "…"


class ToolCatalogue:
    """The tools of one service for other agents, and their calls.

    Args:
        skills: The skills (registry, index, runner).
        prompts: Where the meta-tools' definitions and reply texts come from.
        workflows: The workflows as tools, when the service runs workflows.
        list_skill_tools: Whether ``listed`` includes every skill tool; ``None``: while
            there are fewer than ``AUTO_LIST_LIMIT``.
    """

    def __init__(
        self,
        skills: SkillService,
        prompts: Prompts,
        workflows: WorkflowTools | None = None,
        *,
        list_skill_tools: bool | None = None,
    ) -> None:
        self.skills = skills
        self.prompts = prompts
        self.workflows = workflows
        self.list_skill_tools = list_skill_tools
        self._cache: tuple[tuple[int, int], dict[str, ToolEntry]] | None = None
        self._unloaded = UnloadedTools(skills.registry)

    # Listing.

    def version(self) -> tuple[int, int]:
        """Changes whenever the skills or the workflows are reloaded with changes."""
        return self.skills.registry.version, self.workflows.version() if self.workflows else 0

    def all(self) -> dict[str, ToolEntry]:
        """Every tool by name: the meta-tools, the workflow tools, then each skill tool."""
        version = self.version()
        if self._cache is not None and self._cache[0] == version:
            return self._cache[1]
        entries = {e.name: e for e in self._meta()}
        taken = set(entries)
        for skill in self.skills.registry.all():
            for spec in skill.tools:
                entry = _skill_entry(skill, spec, public_name(skill.name, spec.name, taken))
                entries[entry.name] = entry
                taken.add(entry.name)
        self._cache = (version, entries)
        return entries

    def listed(self) -> list[ToolEntry]:
        """What a caller's tool list holds: the meta-tools always, skill tools as set."""
        entries = list(self.all().values())
        skill_tools = sum(1 for e in entries if e.kind == "skill")
        listing = self.list_skill_tools
        if listing is None:
            listing = skill_tools < AUTO_LIST_LIMIT
        return entries if listing else [e for e in entries if e.kind != "skill"]

    def entry(self, name: str) -> ToolEntry:
        """A tool by the name callers use.

        Raises:
            SkillNotFound: (code ``tool_not_found``) naming close names (``name`` cut), or
                the skill that declares it and why that skill did not load.
        """
        entries = self.all()
        try:
            return entries[name]
        except KeyError:
            why = self._unloaded.why(name)
            raise SkillNotFound("tool", cut(name), list(entries), why) from None

    def _meta(self) -> list[ToolEntry]:
        tools = [
            (self.prompts.tool(SEARCH_SKILLS), True),
            (self.prompts.tool(LOAD_SKILL, server=True), True),
            (self.prompts.tool(CALL_SKILL_TOOL), False),
            (self.prompts.tool(READ_REFERENCE, server=True), True),
        ]
        entries = [
            ToolEntry(t["name"], t["description"], t["parameters"], "meta", read_only=ro)
            for t, ro in tools
        ]
        if self.workflows is not None:
            entries += [
                ToolEntry(t["name"], t["description"], t["parameters"], "workflow", read_only=ro)
                for t, ro in self.workflows.definitions(self.prompts)
            ]
        return entries

    # Calling.

    async def call(
        self,
        name: str,
        arguments: Any,
        *,
        idempotency_key: str | None = None,
        key_owner: str | None = None,
    ) -> ToolResult:
        """Call tool ``name``; every failure of the call comes back as a ToolResult.

        ``arguments`` is a JSON object, its JSON text, or None; any other JSON value is an
        ``invalid_arguments`` result naming its type. They may follow the strict-mode
        variant (nulls for optional values, JSON text for free-form objects). A skill tool
        runs through the ToolRunner, and a result that breaks its ``output_schema`` is an
        ``invalid_output`` error (called directly or through ``call_skill_tool`` alike).
        ``idempotency_key`` is the caller's, one of ``key_owner``'s keys: a skill call's is
        kept under both (one user's keys never answer another's), a workflow run's the
        engine keeps by its user.

        Raises:
            SkillNotFound: ``name`` is no tool of the catalogue (the caller's mistake).
        """
        entry = self.entry(name)
        started = time.perf_counter()
        arguments, problem = _as_object(name, arguments)
        if problem is not None:
            return tool_error(name, "invalid_arguments", problem, started)
        arguments = loosen(entry.parameters, arguments)
        call_key = idempotency_key
        if call_key is not None and key_owner is not None:
            call_key = f"{key_owner}\x1f{call_key}"
        if entry.kind == "skill":
            assert entry.tool is not None
            called = await self.skills.call(entry.tool, arguments, idempotency_key=call_key)
            result = _renamed(await self.skills.handed_over(called), name)
            return checked(result, entry.output_schema)
        if entry.kind == "workflow" and self.workflows is not None:
            refused = self.workflows.refusal(name, arguments, started)
            if refused is not None:
                return refused
        if name == CALL_SKILL_TOOL and isinstance(arguments, dict):
            inner = not_an_object("arguments (the tool's)", arguments.get("arguments"))
            if inner is not None:
                why = f"invalid arguments for {name}: {inner}"
                return tool_error(name, "invalid_arguments", why, started)
        try:
            args, problem = parse_arguments(name, entry.parameters, arguments)
        except SchemaUnusable as exc:  # a tool definition from prompts/ that is broken
            why = f"the arguments of {name} cannot be checked: its parameters schema fails ({exc})"
            return tool_error(name, exc.code, why, started)
        if problem is not None:
            return tool_error(name, "invalid_arguments", problem, started)
        if name == SEARCH_SKILLS:
            return await self._search(str(args["query"]), int(args.get("k", 5)), started)
        if name == LOAD_SKILL:
            return self._load(str(args["name"]), started)
        if name == CALL_SKILL_TOOL:
            return await self._call_skill_tool(args, call_key, started)
        if name == READ_REFERENCE:
            return self._read(str(args["name"]), str(args["path"]), started)
        assert self.workflows is not None
        return await self.workflows.call(
            name, args, started, idempotency_key=idempotency_key, key_owner=key_owner
        )

    async def _search(self, query: str, k: int, started: float) -> ToolResult:
        hits = await self.skills.off_loop(self.skills.search, query, k)
        names = {e.tool: e.name for e in self.all().values() if e.kind == "skill"}
        found = []
        for hit in hits:
            if hit.name in self.skills.registry:
                skill = self.skills.registry.get(hit.name)
                tools = [names.get(t.name, t.name) for t in skill.tools]
                found.append(
                    {"name": skill.name, "summary": summary(skill.description), "tools": tools}
                )
        text = self.prompts.render("skill_search", hits=found, query=query)
        return ok_result(SEARCH_SKILLS, text, {"query": query, "skills": found}, started)

    def _load(self, name: str, started: float) -> ToolResult:
        try:
            skill = self.skills.registry.get(name)
        except SkillNotFound as exc:
            return tool_error(LOAD_SKILL, exc.code, cut_in(str(exc), name), started)
        names = {e.tool: e.name for e in self.all().values() if e.kind == "skill"}
        tools = [
            {
                "name": names.get(t.name, t.name),
                "description": t.description,
                "parameters": t.parameters,
            }
            for t in skill.tools
        ]
        resources = [f"skill://{skill.name}/{path}" for path in skill.references]
        text = self.prompts.render(
            "tool_server_definition",
            skill=skill,
            instructions=skill.body(),
            tools=tools,
            references=list(skill.references),
        )
        data = {
            "name": skill.name,
            "description": skill.description,
            "instructions": skill.body(),
            "tools": tools,
            "references": list(skill.references),
            "resources": resources,
        }
        return ok_result(LOAD_SKILL, text, data, started)

    def _read(self, name: str, path: str, started: float) -> ToolResult:
        try:
            text = read_reference(self.skills.registry.get(name), path)
        except (SkillNotFound, SkillReferenceError) as exc:
            return tool_error(READ_REFERENCE, exc.code, cut_in(str(exc), name, path), started)
        data = {"skill": name, "path": path, "text": text}
        return ok_result(READ_REFERENCE, text, data, started)

    async def _call_skill_tool(
        self, args: dict[str, Any], idempotency_key: str | None, started: float
    ) -> ToolResult:
        skill_name, tool = str(args["skill"]), str(args["tool"])
        try:
            skill = self.skills.registry.get(skill_name)
        except SkillNotFound as exc:
            return tool_error(CALL_SKILL_TOOL, exc.code, cut_in(str(exc), skill_name), started)
        entries = self.all()
        spec = next(
            (t for t in skill.tools if tool in (t.name, _public(entries, skill.name, t.name))),
            None,
        )
        if spec is None:
            having = [t.name for t in skill.tools]
            why = f"skill {skill_name!r} has no tool {cut(tool)!r}; it has {having}"
            return tool_error(CALL_SKILL_TOOL, "tool_not_found", why, started)
        arguments = loosen(spec.parameters, args.get("arguments") or {})
        called = await self.skills.call(spec.name, arguments, idempotency_key=idempotency_key)
        return checked(await self.skills.handed_over(called), spec.output_schema)


def _as_object(name: str, arguments: Any) -> tuple[dict[str, Any] | None, str | None]:
    """The arguments of a call to ``name`` as an object (as sent, or read from their JSON
    text), or why they are none, naming what came when it is JSON."""
    if arguments is None or isinstance(arguments, dict):
        return arguments, None
    problem: str | None = f"the arguments of {name} must be a JSON object"
    if isinstance(arguments, str):
        args, problem = parse_arguments(name, {"type": "object"}, arguments)
        if problem is None:
            return args, None
    return None, not_an_object(f"the arguments of {name}", arguments) or problem


def _public(entries: dict[str, ToolEntry], skill: str, tool: str) -> str | None:
    return next((e.name for e in entries.values() if e.skill == skill and e.tool == tool), None)


def _skill_entry(skill: Skill, spec: ToolSpec, name: str) -> ToolEntry:
    return ToolEntry(
        name=name,
        description=spec.description,
        parameters=spec.parameters,
        kind="skill",
        read_only=spec.read_only,  # a skill.yaml that does not say is no claim
        destructive=None if spec.read_only else spec.destructive,
        idempotent=spec.idempotent,
        output_schema=spec.output_schema,
        skill=skill.name,
        tool=spec.name,
    )


def _renamed(result: ToolResult, name: str) -> ToolResult:
    """The runner's result under the name the caller used."""
    return result if result.tool == name else replace(result, tool=name)
