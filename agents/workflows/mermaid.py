"""A workflow as a Mermaid ``flowchart`` (``skilldesk workflows graph``, the HTTP definition)."""

from __future__ import annotations

import re

from agents.workflows.flow import flow_of
from agents.workflows.loader import Workflow
from agents.workflows.spec import ApprovalNode, GoTo, SwitchNode, WorkflowSpec

# Words Mermaid reads as syntax when they stand as a node id.
_RESERVED = {"end", "graph", "subgraph", "flowchart", "style", "class", "classdef", "click"}
_SHAPES = {"switch": ('{"', '"}'), "approval": ('{{"', '"}}'), "join": ('(("', '"))')}


def _id(node_id: str) -> str:
    return f"{node_id}_" if node_id.lower() in _RESERVED else node_id


def _condition(text: str) -> str:
    """``nodes.order.output.total > 200`` reads as ``order.total > 200`` on an edge."""
    return _text(re.sub(r"\bnodes\.(\w+)\.output\b", r"\1", text))


def _text(text: str, limit: int = 48) -> str:
    text = " ".join(text.split())
    text = text if len(text) <= limit else text[: limit - 1] + "…"
    for raw, code in (("&", "#amp;"), ('"', "#quot;"), ("<", "#lt;"), (">", "#gt;")):
        text = text.replace(raw, code)
    return text.replace("|", "#124;")


def mermaid(workflow: Workflow | WorkflowSpec) -> str:
    """``flowchart TD``: each node (its label or id, and its kind), each edge; a switch's
    cases are labelled with their condition, an approval's reject branch "reject", an
    error's goto "on error" (dotted)."""
    spec = workflow.spec if isinstance(workflow, Workflow) else workflow
    flow = workflow.flow if isinstance(workflow, Workflow) else flow_of(spec)
    lines = ["flowchart TD"]
    for node in spec.nodes:
        start, end = _SHAPES.get(node.kind, ('["', '"]'))
        lines.append(
            f"    {_id(node.id)}{start}{_text(node.label or node.id)}<br/>{node.kind}{end}"
        )
    for node in spec.nodes:
        source = _id(node.id)
        for target in flow.successors.get(node.id, []):
            lines.append(f"    {source} --> {_id(target)}")
        if isinstance(node, SwitchNode):
            for case in node.cases:
                lines.append(f'    {source} -->|"{_condition(case.when)}"| {_id(case.goto)}')
            if node.otherwise:
                lines.append(f"    {source} -->|otherwise| {_id(node.otherwise)}")
        if isinstance(node, ApprovalNode) and node.on_reject:
            lines.append(f"    {source} -.->|reject| {_id(node.on_reject)}")
        if isinstance(node.on_error, GoTo):
            lines.append(f'    {source} -.->|"on error"| {_id(node.on_error.goto)}')
    return "\n".join(lines) + "\n"
