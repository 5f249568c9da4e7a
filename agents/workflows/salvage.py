"""What the other checks can still read of a file whose schema fails, so that one pass reports
every problem: a node's unknown kind must not hide another node's unknown tool.

A node whose own schema fails becomes an ``UnreadNode`` in its place (its id kept when it has
one, so an edge or template naming it is not also reported), which the later checks skip;
an edge that fails is left out; a top-level field that fails is left at its default (the
workflow's name left empty: it names nothing). The graph is whole only when no node and no
edge was left out: the checks that need the whole graph (reachability, loops, joins, which
nodes can have run before a template) are not run on one that is not.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import TypeAdapter, ValidationError

from agents.workflows.checks.findings import Finding
from agents.workflows.spec import Node, NodeBase, WorkflowSpec

_NODE: TypeAdapter[Any] = TypeAdapter(Node)
_PLACEHOLDER = {"name": "unread", "description": "unread", "nodes": [{"id": "x", "kind": "join"}]}


class UnreadNode(NodeBase):
    """A node whose own schema fails: it holds its place and id; no check reads more of it
    and nothing runs it."""

    kind: Literal["unread"] = "unread"


@dataclass(frozen=True)
class Salvage:
    """The readable part of a file.

    Attributes:
        spec: The file's spec, each node that fails an ``UnreadNode``.
        whole: Whether no node and no edge was left out: the graph is the file's.
        edges: The index in the file of each edge kept (``spec.edges[i]`` is the file's
            ``edges[edges[i]]``) when some were left out.
    """

    spec: WorkflowSpec
    whole: bool
    edges: tuple[int, ...] | None = None

    def in_file(self, finding: Finding) -> Finding:
        """``finding`` with its path, and the path its message starts with, in the file's
        own edge numbering."""
        node, path, message = finding
        parts = path.split(".")
        if self.edges is None or parts[0] != "edges" or len(parts) < 2:
            return finding
        parts[1] = str(self.edges[int(parts[1])])
        moved = ".".join(parts)
        if message.startswith(f"{path}:"):
            message = moved + message[len(path) :]
        return node, moved, message


def salvage(data: Mapping[str, Any], error: ValidationError) -> Salvage | None:
    """What of ``data`` (a file's mapping, which ``error`` refused) later checks can read;
    ``None`` when too little is readable: no list of nodes, or inputs that are no mapping of
    input names (a template naming an input could not be judged)."""
    refused: dict[str, set[Any]] = {}
    for err in error.errors():
        loc = err["loc"]
        if not loc:  # the whole file refused (a validator of the spec's own): nothing to keep
            return None
        refused.setdefault(str(loc[0]), set()).add(loc[1] if len(loc) > 1 else None)
    nodes = data.get("nodes")
    if not isinstance(nodes, list) or None in refused.get("nodes", ()):
        return None
    if None in refused.get("inputs", ()):
        return None
    bad_nodes = refused.pop("nodes", set())
    rest = {k: v for k, v in data.items() if k not in refused and k != "nodes"}
    if "inputs" in refused:  # each input that fails is declared all the same
        rest["inputs"] = {k: {} if k in refused["inputs"] else v for k, v in data["inputs"].items()}
    if "outputs" in refused and None not in refused["outputs"]:
        rest["outputs"] = {k: v for k, v in data["outputs"].items() if k not in refused["outputs"]}
    edges: tuple[int, ...] | None = None
    if "edges" in refused and None not in refused["edges"]:
        edges = tuple(i for i in range(len(data["edges"])) if i not in refused["edges"])
        rest["edges"] = [data["edges"][i] for i in edges]
    try:
        spec = WorkflowSpec.model_validate({**_PLACEHOLDER, **rest})
    except ValidationError:
        return None  # what failed is not where pydantic said; the schema's problems stand
    placed = tuple(_unread(raw) if i in bad_nodes else _node(raw) for i, raw in enumerate(nodes))
    update: dict[str, Any] = {"nodes": placed}
    if "name" in refused:
        update["name"] = ""
    whole = not bad_nodes and "edges" not in refused
    return Salvage(spec.model_copy(update=update), whole, edges)


def _node(raw: Any) -> NodeBase:
    try:
        node: NodeBase = _NODE.validate_python(raw)
    except ValidationError:
        return _unread(raw)  # pydantic said nothing about it, but it fails on its own
    return node


def _unread(raw: Any) -> UnreadNode:
    node_id = raw.get("id") if isinstance(raw, dict) else None
    return UnreadNode.model_construct(id=node_id if isinstance(node_id, str) else "")
