"""The checks of a workflow's graph: duplicate ids, edges to missing nodes, unreachable
nodes, unbounded cycles, approvals with a time limit, a workflow that runs itself; then the
joins and parallel approvals (``joins.py``)."""

from __future__ import annotations

from collections.abc import Iterator

from agents.workflows.checks.findings import Finding, suggest
from agents.workflows.checks.joins import check_joins, check_parallel_approvals
from agents.workflows.flow import Flow
from agents.workflows.spec import ApprovalNode, GoTo, SwitchNode, WorkflowNode, WorkflowSpec


def check_graph(spec: WorkflowSpec, flow: Flow | None) -> list[Finding]:
    """Duplicate ids, edges to missing nodes, unreachable nodes, unbounded cycles, joins that
    cannot fire, approvals that could wait at once or with a time limit, a workflow that runs
    itself.

    ``flow`` is ``None`` when the graph is not whole (a node or an edge failed the schema:
    ``salvage.py``): then each node is checked on its own, and the edges against the ids.
    """
    found: list[Finding] = []
    first: dict[str, int] = {}
    for i, node in enumerate(spec.nodes):
        if not node.id:
            continue  # a node that failed the schema, without an id
        if node.id in first:
            found.append(
                (
                    node.id,
                    f"nodes.{i}.id",
                    f"id: duplicate node id {node.id!r} (nodes.{first[node.id]} has it too); "
                    "ids must be unique, templates reach a node as nodes.<id>",
                )
            )
        else:
            first[node.id] = i
        if isinstance(node, WorkflowNode) and node.workflow == spec.name:
            found.append(
                (
                    node.id,
                    f"nodes.{i}.workflow",
                    "workflow: runs its own workflow; a workflow cannot nest in itself",
                )
            )
        if isinstance(node, ApprovalNode) and node.timeout_s is not None:
            found.append(
                (
                    node.id,
                    f"nodes.{i}.timeout_s",
                    "timeout_s: an approval waits for a person's decision without a time "
                    "limit; remove timeout_s from this node",
                )
            )
    found += _missing_targets(spec, set(first))
    if flow is None or len(first) < len(spec.nodes):
        return found  # which node an edge means is unclear: the graph is not checked further
    reachable = flow.reachable()
    explicit = spec.edges is not None or any(n.next is not None for n in spec.nodes)
    for i, node in enumerate(spec.nodes):
        if node.id not in reachable:
            how = (
                "with `edges` or `next`, only the edges given connect the nodes"
                if explicit
                else "a switch does not fall through to the next listed node"
            )
            found.append(
                (
                    node.id,
                    f"nodes.{i}",
                    f"is unreachable: nothing leads to it from the first node {flow.entry!r} "
                    f"({how}); add an edge to it or remove it",
                )
            )
    found += _unbounded_cycles(spec, flow, first)
    found += check_joins(spec, flow, first)
    found += check_parallel_approvals(spec, flow, first)
    return found


def _targets(spec: WorkflowSpec) -> Iterator[tuple[str, str, str]]:
    """Every node name the file gives as a target: (node id or "", path, target)."""
    for i, edge in enumerate(spec.edges or ()):
        yield "", f"edges.{i}.from", edge.source
        yield "", f"edges.{i}.to", edge.target
    for i, node in enumerate(spec.nodes):
        if isinstance(node.next, str):
            yield node.id, f"nodes.{i}.next", node.next
        elif node.next is not None:
            for j, target in enumerate(node.next):
                yield node.id, f"nodes.{i}.next.{j}", target
        if isinstance(node.on_error, GoTo):
            yield node.id, f"nodes.{i}.on_error.goto", node.on_error.goto
        if isinstance(node, SwitchNode):
            for j, case in enumerate(node.cases):
                yield node.id, f"nodes.{i}.cases.{j}.goto", case.goto
            if node.otherwise:
                yield node.id, f"nodes.{i}.otherwise", node.otherwise
        if isinstance(node, ApprovalNode) and node.on_reject:
            yield node.id, f"nodes.{i}.on_reject", node.on_reject


def _missing_targets(spec: WorkflowSpec, ids: set[str]) -> list[Finding]:
    return [
        (
            node,
            path,
            f"{_field(path)}: names node {target!r}, which does not exist"
            + suggest(target, ids, "the nodes"),
        )
        for node, path, target in _targets(spec)
        if target not in ids
    ]


def _field(path: str) -> str:
    """``nodes.3.cases.0.goto`` → ``cases.0.goto`` (the problem names the node already)."""
    parts = path.split(".")
    return ".".join(parts[2:]) if parts[0] == "nodes" and len(parts) > 2 else path


def _unbounded_cycles(spec: WorkflowSpec, flow: Flow, first: dict[str, int]) -> list[Finding]:
    found: list[Finding] = []
    for part in flow.cycles():
        members = sorted((n for n in part if n in first), key=first.__getitem__)
        if not members or any(spec.nodes[first[n]].max_visits > 1 for n in members):
            continue
        head = members[0]
        found.append(
            (
                head,
                f"nodes.{first[head]}",
                f"is on a loop with no bound ({' → '.join([*members, head])}); set "
                "max_visits (> 1) on one of its nodes to allow that many rounds",
            )
        )
    return found
