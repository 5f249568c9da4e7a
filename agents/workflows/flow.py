"""A workflow's graph as the validator and the engine both read it: the entry, each node's
successors (run after it, in parallel when several), its branches (chosen at run time: switch
cases, an approval's reject, an error's goto), and the nodes with an edge into each."""

from __future__ import annotations

from dataclasses import dataclass, field

from agents.workflows.spec import WorkflowSpec


@dataclass(frozen=True)
class Flow:
    """The edges of one workflow.

    Attributes:
        entry: The first node.
        successors: Node → the nodes that run after it (all of them).
        branches: Node → the nodes it may jump to instead (one, chosen at run time).
        incoming: Node → the nodes with a plain edge into it (a join waits for them all).
    """

    entry: str
    successors: dict[str, list[str]] = field(default_factory=dict)
    branches: dict[str, list[str]] = field(default_factory=dict)
    incoming: dict[str, list[str]] = field(default_factory=dict)

    def targets(self, node: str) -> list[str]:
        """Every node ``node`` may lead to."""
        return [*self.successors.get(node, []), *self.branches.get(node, [])]

    def reachable(self) -> set[str]:
        """The nodes a run can reach from the entry."""
        seen, todo = {self.entry}, [self.entry]
        while todo:
            for target in self.targets(todo.pop()):
                if target not in seen:
                    seen.add(target)
                    todo.append(target)
        return seen

    def before(self, node: str) -> set[str]:
        """The nodes that can have run before ``node`` in a run (its ancestors)."""
        parents: dict[str, set[str]] = {}
        for source in self.successors.keys() | self.branches.keys():
            for target in self.targets(source):
                parents.setdefault(target, set()).add(source)
        seen: set[str] = set()
        todo = [node]
        while todo:
            for parent in parents.get(todo.pop(), ()):
                if parent not in seen:
                    seen.add(parent)
                    todo.append(parent)
        return seen

    def cycles(self) -> list[list[str]]:
        """Each cycle of the graph, as a list of nodes (one per strongly connected part).

        Tarjan's algorithm without recursion, so a long workflow cannot exhaust the stack.
        """
        index: dict[str, int] = {}
        low: dict[str, int] = {}
        stack: list[str] = []
        on_stack: set[str] = set()
        out: list[list[str]] = []
        nodes = sorted({self.entry, *self.successors, *self.branches, *self.incoming})
        for root in nodes:
            if root in index:
                continue
            work: list[tuple[str, int]] = [(root, 0)]
            while work:
                node, i = work.pop()
                if i == 0:
                    index[node] = low[node] = len(index)
                    stack.append(node)
                    on_stack.add(node)
                targets = self.targets(node)
                if i < len(targets):
                    work.append((node, i + 1))
                    target = targets[i]
                    if target not in index:
                        work.append((target, 0))
                    elif target in on_stack:
                        low[node] = min(low[node], index[target])
                    continue
                if low[node] == index[node]:
                    part = []
                    while True:
                        top = stack.pop()
                        on_stack.discard(top)
                        part.append(top)
                        if top == node:
                            break
                    if len(part) > 1 or node in targets:
                        out.append(sorted(part))
                if work:  # back in the parent: it reaches what this node reaches
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
        return out


def flow_of(spec: WorkflowSpec) -> Flow:
    """The flow of ``spec``: ``edges`` and each node's ``next``, or, when the file gives
    neither, the nodes in the listed order (a switch never falls through to the next one)."""
    ids = [n.id for n in spec.nodes]
    successors: dict[str, list[str]] = {i: [] for i in ids}
    explicit = spec.edges is not None or any(n.next is not None for n in spec.nodes)
    if explicit:
        for edge in spec.edges or ():
            successors.setdefault(edge.source, []).append(edge.target)
        for node in spec.nodes:
            successors[node.id].extend(node.successors)
    else:
        for node, after in zip(spec.nodes, spec.nodes[1:], strict=False):
            if node.kind != "switch":
                successors[node.id].append(after.id)
    branches = {n.id: n.branches() for n in spec.nodes if n.branches()}
    incoming: dict[str, list[str]] = {}
    for source, targets in successors.items():
        successors[source] = list(dict.fromkeys(targets))
        for target in successors[source]:
            incoming.setdefault(target, []).append(source)
    return Flow(ids[0], successors, branches, incoming)
