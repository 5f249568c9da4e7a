"""The tools node: runs the tool calls of the last AI message (meta-tools and skill tools)."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.runnables import RunnableConfig

from agents.graph.state import ThreadState
from agents.skills.definitions import (
    LOAD_SKILL,
    READ_REFERENCE,
    SkillReferenceError,
    read_reference,
    render_definition,
)
from agents.skills.registry import SkillNotFound
from agents.skills.service import SkillService


def make_tools_node(skills: SkillService) -> Any:
    """Build the node. Every tool call gets exactly one ToolMessage, whatever happens."""

    async def tools(state: ThreadState, config: RunnableConfig) -> dict[str, Any]:
        last = state["messages"][-1]
        assert isinstance(last, AIMessage)
        loaded = list(state.get("loaded_skills", []))
        newly: list[str] = []
        replies: list[ToolMessage] = []
        configurable = config.get("configurable") or {}
        for bad in last.invalid_tool_calls:
            replies.append(
                ToolMessage(
                    content=f"error (invalid_arguments): the arguments of {bad.get('name')} are "
                    f"not valid JSON ({bad.get('error') or 'unparsable'}); call it again with a "
                    "JSON object",
                    tool_call_id=bad.get("id") or "",
                    name=bad.get("name") or "",
                    status="error",
                )
            )
        for call in last.tool_calls:
            name, args, call_id = call["name"], call["args"], call.get("id") or ""
            if name == LOAD_SKILL:
                content, ok, skill_name = _load(skills, args, loaded + newly)
                if ok and skill_name not in loaded + newly:
                    newly.append(skill_name)
            elif name == READ_REFERENCE:
                content, ok = _reference(skills, args, loaded + newly)
            else:
                content, ok = await _call(
                    skills,
                    name,
                    args,
                    loaded + newly,
                    thread_id=configurable.get("thread_id"),
                    run_id=str(config.get("run_id") or ""),
                    call_id=call_id,
                )
            replies.append(
                ToolMessage(
                    content=content,
                    tool_call_id=call_id,
                    name=name,
                    status="success" if ok else "error",
                )
            )
        update: dict[str, Any] = {"messages": replies}
        if newly:
            update["loaded_skills"] = newly
        return update

    return tools


def _load(skills: SkillService, args: dict[str, Any], loaded: list[str]) -> tuple[str, bool, str]:
    name = str(args.get("name", "")).strip()
    if name in loaded:
        return (
            f"Skill {name!r} is already loaded in this conversation; its instructions "
            "are above and its tools are available.",
            True,
            name,
        )
    try:
        skill = skills.registry.get(name)
    except SkillNotFound as exc:
        return f"error (unknown_skill): {exc}", False, name
    return render_definition(skill), True, name


def _reference(skills: SkillService, args: dict[str, Any], loaded: list[str]) -> tuple[str, bool]:
    name, path = str(args.get("name", "")), str(args.get("path", ""))
    if name not in loaded:
        return f"error (skill_not_loaded): load skill {name!r} with load_skill first", False
    try:
        return read_reference(skills.registry.get(name), path), True
    except (SkillNotFound, SkillReferenceError) as exc:
        return f"error (bad_reference): {exc}", False


async def _call(
    skills: SkillService, name: str, args: dict[str, Any], loaded: list[str], **context: Any
) -> tuple[str, bool]:
    try:
        skill, _ = skills.registry.tool(name)
    except SkillNotFound as exc:
        return f"error (unknown_tool): {exc}", False
    if skill.name not in loaded:
        # Only tools of skills this conversation loaded are callable: a name the model saw in
        # some text cannot widen what it may do.
        return (
            f"error (skill_not_loaded): {name} belongs to skill {skill.name!r}; call "
            f"load_skill with name {skill.name!r} first"
        ), False
    result = await skills.call(name, args, **context)
    return result.content, result.ok
