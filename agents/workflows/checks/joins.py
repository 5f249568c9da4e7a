"""The checks of where a workflow's parallel branches meet: joins that cannot fire or may
wait for ever, and approvals on parallel branches (a run waits for one decision at a time).

A node runs only if certain branch decisions were taken on the way to it (a switch going to
one case, an approval rejected, a node failing to its goto). A join waits for every node with
an edge into it: if one of them needs a decision another does not, a run that takes the
other way waits at the join for ever.
"""

from __future__ import annotations

from agents.workflows.checks.findings import Finding
from agents.workflows.flow import Flow
from agents.workflows.spec import ApprovalNode, JoinNode, SwitchNode, WorkflowSpec

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
    # The guards are the greatest fixed point of these equations, whatever order the nodes
    # are visited in; the flow's order (sources first) settles a graph without loops in two
    # rounds, where the file's order could take one round per node.
    order = [n for n in dict.fromkeys([*flow.ordered(), *first]) if n in routes]
    for _ in range(4 * len(first) + 4):
        changed = False
        for node in order:
            incoming = routes[node]
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


def check_joins(spec: WorkflowSpec, flow: Flow, first: dict[str, int]) -> list[Finding]:
    """Joins that cannot fire: branched to, with fewer than two incoming edges, or waiting
    for nodes that do not all run. ``first``: each node id's index in the file."""
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
    common = frozenset.intersection(*(guards[n] for n in known)) if known else frozenset()
    for a in known:
        if guards[a] == common:
            continue  # a subset of every other one's: no decision of its to report
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


def check_parallel_approvals(
    spec: WorkflowSpec, flow: Flow, first: dict[str, int]
) -> list[Finding]:
    """Approvals on parallel branches: both could wait at once, and a run waits for one
    decision at a time."""
    guards = _guards(spec, flow, first)
    gates = [n.id for n in spec.nodes if isinstance(n, ApprovalNode) and n.id in guards]
    before = flow.ancestors() if len(gates) > 1 else {}
    found: list[Finding] = []
    for j, b in enumerate(gates):
        for a in gates[:j]:
            if a in before[b] or b in before[a] or _exclusive(guards[a], guards[b]):
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


def _exclusive(a: frozenset[Decision], b: frozenset[Decision]) -> bool:
    """Whether ``a`` and ``b`` take different ways at one node (no run takes both)."""
    ways: dict[str, set[str | None]] = {}
    for node, way in a:
        ways.setdefault(node, set()).add(way)
    return any(node in ways and ways[node] != {way} for node, way in b)
