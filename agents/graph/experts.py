"""Experts: one skill's expert, and the joint expert that holds several small skills."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.runnables import RunnableConfig

from agents.errors import ModelError, SkillNotFound
from agents.graph.nodes import (
    NEXT_BEST,
    Brain,
    Node,
    last_user_text,
    loop_update,
    no_model_reply,
)
from agents.loop import LoopResult, expert_system
from agents.memory.summaries import summary_text
from agents.run import emit
from agents.skills.definitions import definition_tokens, side_effects
from agents.skills.meta import LOAD_SKILL, META_TOOLS, NOTE_SKILL, Scope
from agents.state.schema import PlannedTask, Task, TaskUpdate, ThreadState


def expert_prompt(
    brain: Brain,
    skill_names: str | list[str],
    task: str | None = None,
    inputs: dict[str, Any] | None = None,
    requests: list[Task] | None = None,
    summary: str | None = None,
    choose: bool = False,
    skill_index: str = "",
    attachments: list[Any] | None = None,
    note: bool = False,
) -> str:
    """An expert's system prompt for the named skills (see ``expert_system``)."""
    assert brain.skills is not None
    names = [skill_names] if isinstance(skill_names, str) else skill_names
    skills = [brain.skills.registry.get(name) for name in names]
    return expert_system(
        brain.prompts,
        skills,
        task=task,
        inputs=inputs,
        requests=list(requests or []),
        summary=summary,
        choose=choose,
        skill_index=skill_index,
        attachments=attachments,
        note=note,
    )


def make_expert(brain: Brain) -> Node:
    """One expert answers with one skill, or holds the route's close candidates and uses the
    one that fits (or none); its answer goes to the user as it wrote it."""

    async def expert(state: ThreadState, config: RunnableConfig) -> dict[str, Any]:
        route = state.get("route") or {}
        choosing = route.get("kind") == "candidates"
        names = list(route.get("skills") or []) if choosing else [str(route.get("target"))]
        installed = brain.skills.registry if brain.skills is not None else None
        names = [n for n in names if installed is not None and n in installed]
        if not names:
            name = ", ".join(route.get("skills") or []) or str(route.get("target"))
            answer = AIMessage(content=brain.prompts.reply("unknown_skill", name=name))
            return {"messages": [answer]}
        if not brain.gateway.configured:
            return no_model_reply()
        scope = Scope(loaded=list(names), loadable=set(names))
        summary = summary_text(state.get("summary"))
        index_text = ""
        if choosing and brain.skills is not None:  # the next best, should no candidate fit
            index_text, listed = brain.skills.index.compact(
                last_user_text(state),
                budget_tokens=brain.options.index_budget_tokens,
                k=NEXT_BEST,
                exclude=set(names),
            )
            scope.loadable = {*names, *listed}
            if brain.options.note_skills:
                registry = brain.skills.registry
                scope.notable = tuple(n for n in names if registry.get(n).instruction_only)
        system = expert_prompt(
            brain,
            names,
            summary=summary,
            choose=choosing,
            skill_index=index_text,
            attachments=state.get("attachments"),
            note=bool(scope.notable),
        )
        result = await brain.answer(system, list(state.get("messages", [])), scope, config)
        # The definitions lived in this expert's system prompt, not in the history, so the
        # skills are not recorded as loaded for later turns of the general assistant.
        update = loop_update(result)
        update.pop("loaded_skills", None)
        if choosing:
            used = _skills_used(brain, result)
            if len(used) == 1:  # a follow-up stays with the skill the model chose
                update["route"] = {**route, "target": used[0]}
        return update

    return expert


def _skills_used(brain: Brain, result: LoopResult) -> list[str]:
    """The skills whose tools the loop called, that it loaded, or that it noted, in order
    (a refused load or note counts for none)."""
    assert brain.skills is not None
    used: list[str] = []
    refused = {
        m.tool_call_id
        for m in result.messages
        if isinstance(m, ToolMessage) and m.status == "error"
    }
    for message in result.messages:
        if isinstance(message, AIMessage):
            for call in message.tool_calls:
                # The skill whose instructions it followed, or one of the next best it loaded.
                if call["name"] in (NOTE_SKILL, LOAD_SKILL):
                    name = str(call["args"].get("name"))
                    if call["id"] in refused or name not in brain.skills.registry:
                        continue
                else:
                    try:
                        name = brain.skills.registry.tool(call["name"])[0].name
                    except SkillNotFound:
                        continue
                if name not in used:
                    used.append(name)
    return used


def make_joint(brain: Brain) -> Node:
    """One expert with the skills of every task answers the whole message.

    For independent requests whose skills are small, this is the cheapest plan: the model
    calls every request's tools in one turn (they run concurrently) and answers from their
    results in the next, two model calls in all against an expert per task plus an
    aggregator. Its answer reaches the user as written; each task's status is read from the
    results of its skill's tools.
    """

    async def joint_expert(state: ThreadState, config: RunnableConfig) -> dict[str, Any]:
        assert brain.skills is not None
        workspace = state.get("workspace") or {}
        tasks: list[Task] = list(workspace.get("tasks", {}).values())
        names = [n for n in dict.fromkeys(t["skill"] for t in tasks) if n in brain.skills.registry]
        history = list(state.get("messages", []))
        scope = Scope(loaded=list(names), loadable=set(names))
        try:
            result = await brain.answer(
                expert_prompt(
                    brain,
                    names,
                    requests=tasks,
                    summary=summary_text(state.get("summary")),
                    attachments=state.get("attachments"),
                ),
                history,
                scope,
                config,
            )
        except ModelError as exc:
            # As in the parallel plan: the turn ends with an answer that says what failed,
            # and every task records why.
            emit("error", code=exc.code, message=exc.message)
            failed = TaskUpdate(status="failed", error=exc.message)
            answer = brain.prompts.reply("request_failed", error=exc.message)
            return {
                "messages": [AIMessage(content=answer)],
                "workspace": {
                    "plan_id": workspace.get("plan_id"),
                    "tasks": {t["id"]: dict(failed) for t in tasks},
                },
            }
        return {
            **loop_update(result),
            "workspace": {
                "plan_id": workspace.get("plan_id"),
                "tasks": _outcomes(brain, tasks, result),
            },
        }

    return joint_expert


def _outcomes(brain: Brain, tasks: list[Task], result: LoopResult) -> dict[str, TaskUpdate]:
    """Each task's status from its skill's tool results in the joint expert's run."""
    assert brain.skills is not None
    by_skill: dict[str, list[ToolMessage]] = {}
    for message in result.messages:
        if isinstance(message, ToolMessage) and message.name not in META_TOOLS:
            try:
                owner, _ = brain.skills.registry.tool(str(message.name))
            except SkillNotFound:
                continue
            by_skill.setdefault(owner.name, []).append(message)
    answer = str(result.answer.text)
    outcomes: dict[str, TaskUpdate] = {}
    for task in tasks:
        messages = by_skill.get(task["skill"], [])
        good = [str(m.content) for m in messages if m.status != "error"]
        bad = [str(m.content) for m in messages if m.status == "error"]
        if good:
            outcomes[task["id"]] = TaskUpdate(status="done", result="\n".join(good), error=None)
        elif bad or result.stopped:
            outcomes[task["id"]] = TaskUpdate(status="failed", error=bad[-1] if bad else answer)
        else:  # answered from the skill's instructions alone
            outcomes[task["id"]] = TaskUpdate(status="done", result=answer, error=None)
    return outcomes


def one_expert_fits(brain: Brain, tasks: list[PlannedTask]) -> bool:
    """Whether one expert holding every task's skill should answer (see ``make_joint``)."""
    budget = brain.options.joint_budget_tokens
    if brain.skills is None or budget <= 0 or not tasks:
        return False
    if any(t["depends_on"] for t in tasks):
        return False  # a task needs another's result: experts run in order
    try:
        skills = [brain.skills.registry.get(n) for n in dict.fromkeys(t["skill"] for t in tasks)]
    except SkillNotFound:
        return False
    if any(side_effects(s) for s in skills):
        # Separate experts keep each request's tools apart: text returned by one request's
        # lookup must not be able to trigger another request's side-effecting tool.
        return False
    return sum(definition_tokens(s) for s in skills) <= budget
