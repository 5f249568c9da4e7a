"""A workflow's graph as the validator and the engine both read it: the entry, each node's
successors (run after it, in parallel when several), its branches (chosen at run time: switch
cases, an approval's reject, an error's goto), and the nodes with an edge into each."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Set
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

    def ancestors(self) -> dict[str, NodeSet]:
        """Each node → the nodes that can have run before it in a run: those with a path to
        it (itself only when it is on a cycle).

        One pass over the graph for all nodes, so checking every node costs about what
        checking one did: the strongly connected parts in topological order, each part's
        ancestors a bit set made of its parents' (a part's members share one set).
        """
        parts = self._components()
        names = [n for part in parts for n in part]
        index = {n: i for i, n in enumerate(names)}
        part_of = {n: i for i, part in enumerate(parts) for n in part}
        above = [0] * len(parts)
        for i in reversed(range(len(parts))):  # Tarjan gives the sinks first
            part = parts[i]
            if len(part) > 1 or part[0] in self.targets(part[0]):  # a cycle: all before all
                above[i] |= sum(1 << index[n] for n in part)
            for node in part:
                for target in self.targets(node):
                    if part_of[target] != i:
                        above[part_of[target]] |= above[i] | 1 << index[node]
        return {n: NodeSet(above[part_of[n]], index, names) for n in names}

    def ordered(self) -> list[str]:
        """Every node, each after the nodes that lead to it; a cycle's nodes in the order a
        search from where it is entered finds them."""
        return [n for part in reversed(self._components()) for n in reversed(part)]

    def cycles(self) -> list[list[str]]:
        """Each cycle of the graph, as a list of nodes (one per strongly connected part)."""
        return [
            sorted(part)
            for part in self._components()
            if len(part) > 1 or part[0] in self.targets(part[0])
        ]

    def _components(self) -> list[list[str]]:
        """The strongly connected parts of the graph, each after every part it leads to.

        Tarjan's algorithm without recursion, so a long workflow cannot exhaust the stack.
        """
        index: dict[str, int] = {}
        low: dict[str, int] = {}
        stack: list[str] = []
        on_stack: set[str] = set()
        out: list[list[str]] = []
        targets_of: dict[str, list[str]] = {}
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
                    targets_of[node] = self.targets(node)
                targets = targets_of[node]
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
                    out.append(part)
                if work:  # back in the parent: it reaches what this node reaches
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
        return out


class NodeSet(Set[str]):
    """A set of node ids kept as a bit set over the graph's nodes (cheap to make and test)."""

    __slots__ = ("_bits", "_index", "_names")

    def __init__(self, bits: int, index: Mapping[str, int], names: list[str]) -> None:
        self._bits, self._index, self._names = bits, index, names

    def __contains__(self, node: object) -> bool:
        i = self._index.get(node) if isinstance(node, str) else None
        return i is not None and self._bits >> i & 1 == 1

    def __iter__(self) -> Iterator[str]:
        bits = self._bits
        while bits:
            low = bits & -bits
            yield self._names[low.bit_length() - 1]
            bits ^= low

    def __len__(self) -> int:
        return self._bits.bit_count()

    def __repr__(self) -> str:
        return f"NodeSet({sorted(self)!r})"


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
