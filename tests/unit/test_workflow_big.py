"""A large workflow's checks, each one pass over the graph (or close), find what they find in
a small one (their time is measured in ``tests/integration/test_workflow_load_time.py``)."""

from __future__ import annotations

import random
from pathlib import Path

from agents.workflows.flow import Flow
from tests.workflowkit import big_workflow, problems


def test_a_big_workflow_still_refuses_a_node_that_runs_later(tmp_path: Path) -> None:
    text = big_workflow(100)
    # b39 loops back to its start: a node on the loop may read one after it on the loop.
    looped = "prior: '{{ nodes.b38_end.output }}'"
    assert looped in text
    text = text.replace(looped, "prior: '{{ nodes.b39_ask.output }}'")
    later = "x: '{{ nodes.b10_start.output.value }}'"
    assert later in text
    text = text.replace(later, "x: '{{ nodes.b11_start.output.value }}'")
    assert [(p.node, p.message) for p in problems(tmp_path, text)] == [
        (
            "b10_left",
            "values.x: refers to nodes.b11_start, a node that cannot have run before it (no "
            "path leads from it here)",
        )
    ]


def _walked_back(flow: Flow, node: str) -> set[str]:
    """The nodes with a path to ``node``, walked back from it (one node at a time)."""
    parents: dict[str, set[str]] = {}
    for source in flow.successors.keys() | flow.branches.keys():
        for target in flow.targets(source):
            parents.setdefault(target, set()).add(source)
    seen: set[str] = set()
    todo = [node]
    while todo:
        for parent in parents.get(todo.pop(), ()):
            if parent not in seen:
                seen.add(parent)
                todo.append(parent)
    return seen


def test_the_ancestors_of_every_node_are_those_a_walk_back_finds() -> None:
    rng = random.Random(5)
    for _ in range(300):
        ids = [f"n{i}" for i in range(rng.randint(1, 30))]
        pick = [*ids, "gone"]  # an edge may name a missing node
        successors = {n: rng.sample(pick, min(len(pick), rng.randint(0, 3))) for n in ids}
        branches = {n: rng.sample(pick, rng.randint(1, 2)) for n in ids if rng.random() < 0.2}
        flow = Flow(ids[0], successors, branches, {})
        ancestors = flow.ancestors()
        for node in [*ids, "gone"]:
            expected = _walked_back(flow, node)
            assert set(ancestors.get(node, ())) == expected, (node, successors, branches)
            assert all(n in ancestors.get(node, ()) for n in expected)
            assert not any(n in ancestors.get(node, ()) for n in set(pick) - expected)
