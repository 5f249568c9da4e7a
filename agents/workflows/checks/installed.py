"""The checks of what a workflow names in the installed world: tools (and the arguments given
them), skills, model profiles and sub-workflows (none of which may wait for an approval)."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from agents.workflows.checks.findings import Finding, suggest
from agents.workflows.spec import (
    ApprovalNode,
    ExpertNode,
    LlmNode,
    ToolNode,
    WorkflowNode,
    WorkflowSpec,
)

# What a workflow may name in the installed world. ``tools`` maps each tool to the JSON
# Schema of its parameters (arguments are checked against it) or is a plain set of names.
Tools = Mapping[str, Mapping[str, Any]] | Collection[str]


def check_installed(
    spec: WorkflowSpec,
    *,
    tools: Tools | None = None,
    skills: Collection[str] | None = None,
    profiles: Collection[str] | None = None,
    workflows: Mapping[str, WorkflowSpec] | Collection[str] | None = None,
) -> list[Finding]:
    """Tools, skills, model profiles and sub-workflows the nodes name; each collection is
    checked only when given. ``tools`` mapping to parameter schemas checks the arguments;
    ``workflows`` mapping names to specs checks that no sub-workflow can wait for an
    approval."""
    found: list[Finding] = []
    for i, node in enumerate(spec.nodes):
        at = f"nodes.{i}"
        if isinstance(node, ToolNode) and tools is not None:
            if node.tool not in tools:
                found.append(
                    (
                        node.id,
                        f"{at}.tool",
                        f"tool: {node.tool!r} is not installed: no skill offers it"
                        + suggest(node.tool, tools, "the tools"),
                    )
                )
            elif isinstance(tools, Mapping):
                found += _arguments(node, at, tools[node.tool])
        if isinstance(node, ExpertNode) and skills is not None and node.skill not in skills:
            found.append(
                (
                    node.id,
                    f"{at}.skill",
                    f"skill: {node.skill!r} is not installed"
                    + suggest(node.skill, skills, "the skills"),
                )
            )
        if (
            isinstance(node, ExpertNode | LlmNode)
            and node.model is not None
            and profiles is not None
            and node.model not in profiles
        ):
            found.append(
                (
                    node.id,
                    f"{at}.model",
                    f"model: profile {node.model!r} is not configured"
                    + suggest(node.model, profiles, "the profiles"),
                )
            )
        if (
            isinstance(node, WorkflowNode)
            and workflows is not None
            and node.workflow != spec.name
            and node.workflow not in workflows
        ):
            found.append(
                (
                    node.id,
                    f"{at}.workflow",
                    f"workflow: {node.workflow!r} is not loaded"
                    + suggest(node.workflow, workflows, "the workflows"),
                )
            )
        elif isinstance(node, WorkflowNode) and isinstance(workflows, Mapping):
            found += _waiting_child(node, at, workflows)
            found += _child_inputs(node, at, workflows.get(node.workflow))
    return found


def _child_inputs(node: WorkflowNode, at: str, child: WorkflowSpec | None) -> list[Finding]:
    """A finding for each input the node gives that the sub-workflow does not declare, and
    for each it requires (with no default) that the node does not give: found at load, not
    when the node runs."""
    if child is None:
        return []
    found: list[Finding] = []
    for name in node.inputs:
        if name not in child.inputs:
            why = f"inputs.{name}: {name!r} is not an input of {child.name}"
            found.append(
                (node.id, f"{at}.inputs.{name}", why + suggest(name, child.inputs, "its inputs"))
            )
    for name, declared in child.inputs.items():
        if declared.required and declared.default is None and name not in node.inputs:
            why = f"inputs: {child.name} requires {name!r}, which the node does not give"
            found.append((node.id, f"{at}.inputs", why))
    return found


def _waiting_child(
    node: WorkflowNode, at: str, workflows: Mapping[str, WorkflowSpec]
) -> list[Finding]:
    """A finding when the sub-workflow, or one it runs, has an approval: a sub-workflow runs
    to its end inside the node, and the parent cannot wait for its child's decision."""
    todo, seen = [[node.workflow]], {node.workflow}
    while todo:
        chain = todo.pop()
        spec = workflows.get(chain[-1])
        for child in spec.nodes if spec is not None else ():
            if isinstance(child, ApprovalNode):
                where = f"its node {child.id!r}"
                if len(chain) > 1:
                    where = f"node {child.id!r} of {' → '.join(chain)}"
                return [
                    (
                        node.id,
                        f"{at}.workflow",
                        f"workflow: {node.workflow!r} can wait for an approval ({where}), "
                        "and a sub-workflow must run to its end inside this node; move the "
                        "approval into this workflow, "
                        f"before {node.id!r}, or run {node.workflow!r} on its own",
                    )
                ]
            if isinstance(child, WorkflowNode) and child.workflow not in seen:
                seen.add(child.workflow)
                todo.append([*chain, child.workflow])
    return []


def _arguments(node: ToolNode, at: str, schema: Mapping[str, Any]) -> list[Finding]:
    """Argument names against the tool's parameters (values are checked when the node runs)."""
    found: list[Finding] = []
    properties = schema.get("properties") or {}
    if schema.get("additionalProperties") is False:
        for name in node.arguments:
            if name not in properties:
                found.append(
                    (
                        node.id,
                        f"{at}.arguments.{name}",
                        f"arguments: tool {node.tool!r} takes no argument {name!r}"
                        + suggest(name, properties, "its arguments"),
                    )
                )
    required = [*(schema.get("required") or ())]
    for part in schema.get("allOf") or ():  # every part's required names are required
        required += [r for r in (part.get("required") or ()) if r not in required]
    missing = [r for r in required if r not in node.arguments]
    if missing:
        found.append(
            (
                node.id,
                f"{at}.arguments",
                f"arguments: tool {node.tool!r} needs {', '.join(map(repr, missing))}",
            )
        )
    for key in ("anyOf", "oneOf"):  # alternatives: the arguments must meet one's names
        ways = [tuple(part.get("required") or ()) for part in schema.get(key) or ()]
        if ways and all(ways) and not any(set(way) <= node.arguments.keys() for way in ways):
            either = " or ".join(" and ".join(map(repr, way)) for way in ways)
            found.append(
                (node.id, f"{at}.arguments", f"arguments: tool {node.tool!r} needs {either}")
            )
    return found
