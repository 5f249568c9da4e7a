"""The checks of a workflow beyond its schema: the graph and the installed world (the
templates' checks are in templates.py).

Each check returns findings ``(node id, dotted field path, message)``; the loader turns them
into problems naming the file and the line (``nodes.2.cases.0.goto`` → where the parser saw it).
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Iterator, Mapping
from typing import Any

from agents.workflows.flow import Flow
from agents.workflows.spec import (
    ApprovalNode,
    ExpertNode,
    GoTo,
    JoinNode,
    LlmNode,
    SwitchNode,
    ToolNode,
    WorkflowNode,
    WorkflowSpec,
)

Finding = tuple[str, str, str]  # (node id or "", dotted path in the file, message)
# What a workflow may name in the installed world. ``tools`` maps each tool to the JSON
# Schema of its parameters (arguments are checked against it) or is a plain set of names.
Tools = Mapping[str, Mapping[str, Any]] | Collection[str]


_LISTED = 12  # names listed in a message at most


def suggest(name: str, known: Collection[str], what: str) -> str:
    """``; did you mean 'x'? (the nodes: a, b, ...)``: close names, then the names there are."""
    close = difflib.get_close_matches(name, list(known), n=2)
    hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    names = sorted(known)
    listed = ", ".join(names[:_LISTED]) if names else "none"
    more = f" and {len(names) - _LISTED} more" if len(names) > _LISTED else ""
    return f"{hint} ({what}: {listed}{more})"


# The graph.


def check_graph(spec: WorkflowSpec, flow: Flow) -> list[Finding]:
    """Duplicate ids, edges to missing nodes, unreachable nodes, unbounded cycles, joins that
    cannot fire, approvals that could wait at once or with a time limit, a workflow that runs
    itself."""
    found: list[Finding] = []
    first: dict[str, int] = {}
    for i, node in enumerate(spec.nodes):
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
    if len(first) < len(spec.nodes):
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
    found += _joins(spec, flow, first)
    found += _parallel_approvals(spec, flow, first)
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


# Joins. A node runs only if certain branch decisions were taken on the way to it (a switch
# going to one case, an approval rejected, a node failing to its goto). A join waits for every
# node with an edge into it: if one of them needs a decision another does not, a run that
# takes the other way waits at the join for ever.

Decision = tuple[str, str | None]  # (node, the branch target it took; None: its normal way)


def _guards(
    spec: WorkflowSpec, flow: Flow, first: dict[str, int]
) -> dict[str, frozenset[Decision]]:
    """Each reachable node → the decisions every run that reaches it has taken."""
    routes: dict[str, list[tuple[str, Decision | None]]] = {n: [] for n in first}
    for source in first:
        branching = bool(flow.branches.get(source))
        for target in flow.successors.get(source, []):
            if target in routes:
                routes[target].append((source, (source, None) if branching else None))
        for target in flow.branches.get(source, []):
            if target in routes:
                routes[target].append((source, (source, target)))
    guards: dict[str, frozenset[Decision] | None] = dict.fromkeys(first)
    guards[flow.entry] = frozenset()
    for _ in range(4 * len(first) + 4):
        changed = False
        for node, incoming in routes.items():
            if node == flow.entry:
                continue
            is_join = isinstance(spec.nodes[first[node]], JoinNode)
            options = [
                _taken(guards[u], d)
                for u, d in incoming
                if not (is_join and d is not None and d[1] is not None)
            ]
            known = [o for o in options if o is not None]
            if is_join:
                new = None if not known or len(known) < len(options) else frozenset().union(*known)
            else:
                new = frozenset.intersection(*known) if known else None
            if new is not None and new != guards[node]:
                guards[node], changed = new, True
        if not changed:
            break
    return {n: g for n, g in guards.items() if g is not None}


def _taken(
    guard: frozenset[Decision] | None, decision: Decision | None
) -> frozenset[Decision] | None:
    if guard is None or decision is None:
        return guard
    return guard | {decision}


def _describe(spec: WorkflowSpec, first: dict[str, int], decision: Decision) -> str:
    source, target = decision
    node = spec.nodes[first[source]]
    if isinstance(node, SwitchNode):
        return f"switch {source!r} goes to {target!r}" if target else f"switch {source!r} goes on"
    if isinstance(node, ApprovalNode) and target is not None and target == node.on_reject:
        return f"approval {source!r} is rejected"
    if isinstance(node, ApprovalNode) and target is None:
        return f"approval {source!r} is approved"
    return f"{source!r} fails" if target else f"{source!r} succeeds"


def _joins(spec: WorkflowSpec, flow: Flow, first: dict[str, int]) -> list[Finding]:
    found: list[Finding] = []
    guards = _guards(spec, flow, first)
    for i, node in enumerate(spec.nodes):
        if not isinstance(node, JoinNode) or first.get(node.id) != i:
            continue
        path = f"nodes.{i}"
        branched = sorted(s for s, ts in flow.branches.items() if node.id in ts)
        if branched:
            found.append(
                (
                    node.id,
                    path,
                    f"is a join, yet {', '.join(map(repr, branched))} branches to it (a case, "
                    "a reject or a goto); a join runs when every node with an edge into it has "
                    "run — point the branch at a node before the join",
                )
            )
        incoming = [n for n in flow.incoming.get(node.id, []) if n in first]
        if len(incoming) < 2:
            found.append(
                (
                    node.id,
                    path,
                    f"is a join with {len(incoming)} incoming edge(s); a join waits for two "
                    "or more parallel branches — give it an edge from each, or remove it",
                )
            )
            continue
        problem = _conflict(spec, first, incoming, guards)
        if problem:
            found.append((node.id, path, problem))
    return found


def _conflict(
    spec: WorkflowSpec,
    first: dict[str, int],
    incoming: list[str],
    guards: dict[str, frozenset[Decision]],
) -> str:
    known = [n for n in incoming if n in guards]
    for a in known:
        for b in known:
            for decision in sorted(guards[a] - guards[b], key=str):
                rival = next(
                    (d for d in guards[b] if d[0] == decision[0] and d[1] != decision[1]), None
                )
                if rival is not None:
                    return (
                        f"can never fire: {a!r} runs only when "
                        f"{_describe(spec, first, decision)}, {b!r} only when "
                        f"{_describe(spec, first, rival)}; a join waits for every node with an "
                        "edge into it — join only branches that all run, or let the branches "
                        "meet at a plain node"
                    )
                return (
                    f"may wait for ever: {a!r} runs only when "
                    f"{_describe(spec, first, decision)}, {b!r} runs without that; a join "
                    "waits for every node with an edge into it — join only branches that all "
                    "run, or let the branches meet at a plain node"
                )
    return ""


def _parallel_approvals(spec: WorkflowSpec, flow: Flow, first: dict[str, int]) -> list[Finding]:
    """Approvals on parallel branches: both could wait at once, and a run waits for one
    decision at a time."""
    guards = _guards(spec, flow, first)
    gates = [n.id for n in spec.nodes if isinstance(n, ApprovalNode) and n.id in guards]
    after = {gate: _after(flow, gate) for gate in gates}
    found: list[Finding] = []
    for j, b in enumerate(gates):
        for a in gates[:j]:
            ordered = b in after[a] or a in after[b]
            exclusive = any(d[0] == r[0] and d[1] != r[1] for d in guards[a] for r in guards[b])
            if ordered or exclusive:
                continue
            found.append(
                (
                    b,
                    f"nodes.{first[b]}",
                    f"is an approval on a branch parallel to approval {a!r}: both could wait "
                    "at once, and a run waits for one decision at a time — put one after the "
                    f"other (an edge {a} → {b}), or ask both in one approval",
                )
            )
            break
    return found


def _after(flow: Flow, node: str) -> set[str]:
    """The nodes a run can reach after ``node``."""
    seen: set[str] = set()
    todo = list(flow.targets(node))
    while todo:
        current = todo.pop()
        if current not in seen:
            seen.add(current)
            todo += flow.targets(current)
    return seen


# The installed world.


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
    missing = [r for r in schema.get("required") or () if r not in node.arguments]
    if missing:
        found.append(
            (
                node.id,
                f"{at}.arguments",
                f"arguments: tool {node.tool!r} needs {', '.join(map(repr, missing))}",
            )
        )
    return found
