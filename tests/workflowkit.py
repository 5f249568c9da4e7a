"""Workflows written in a test, served as the registry serves loaded ones."""

from __future__ import annotations

import itertools
import textwrap
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from agents.errors import WorkflowLoadError, WorkflowNotFound, WorkflowProblem
from agents.workflows.flow import Flow, flow_of
from agents.workflows.loader import load_workflow
from agents.workflows.spec import ToolNode, WorkflowSpec


@dataclass(frozen=True)
class Loaded:
    """A workflow as the engine reads it from the registry."""

    name: str
    spec: WorkflowSpec
    flow: Flow
    fingerprint: str = "test"


class Workflows:
    """Workflows parsed from YAML texts, found by name."""

    def __init__(self, *texts: str) -> None:
        specs = [WorkflowSpec.model_validate(yaml.safe_load(t)) for t in texts]
        self.loaded = {s.name: Loaded(s.name, s, flow_of(s)) for s in specs}
        self.withdrawn: dict[str, str] = {}
        self.uninstalled: set[str] = set()  # tools taken away (``not_installed``)

    def not_installed(self, spec: WorkflowSpec, done: Collection[str] = ()) -> list[str]:
        """Nodes not in ``done`` whose tool is in ``uninstalled``, as the registry says it."""
        return [
            f"node {n.id!r}: tool: {n.tool!r} is not installed"
            for n in spec.nodes
            if isinstance(n, ToolNode) and n.tool in self.uninstalled and n.id not in done
        ]

    def get(self, name: str) -> Loaded:
        """The workflow ``name``; raises WorkflowNotFound as the registry does."""
        try:
            return self.loaded[name]
        except KeyError:
            raise WorkflowNotFound(name, list(self.loaded), self.withdrawn.get(name, "")) from None

    def edit(self, text: str, fingerprint: str) -> None:
        """Serve a new version of a workflow (its file saved again)."""
        spec = WorkflowSpec.model_validate(yaml.safe_load(text))
        self.loaded[spec.name] = Loaded(spec.name, spec, flow_of(spec), fingerprint)

    def withdraw(self, name: str, reason: str) -> None:
        """Stop serving ``name`` (its file broken, a skill it needs gone)."""
        del self.loaded[name]
        self.withdrawn[name] = reason


# Writing a workflow file and reading what its loading reports.

ROOT = Path(__file__).resolve().parents[1]

HEAD = """\
name: demo
description: A demo workflow.
inputs:
  device_id: {type: string}
"""


def write(tmp_path: Path, text: str, name: str = "demo.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def problems(tmp_path: Path, text: str, **world: Any) -> list[WorkflowProblem]:
    path = write(tmp_path, text)
    with pytest.raises(WorkflowLoadError) as caught:
        load_workflow(path, **world)
    assert all(p.file == str(path) for p in caught.value.problems)
    return caught.value.problems


def one(tmp_path: Path, text: str, **world: Any) -> WorkflowProblem:
    found = problems(tmp_path, text, **world)
    assert len(found) == 1, "\n".join(map(str, found))
    return found[0]


def alias_bomb(levels: int = 9, key: str = "description") -> str:
    """QA's "billion laughs": each anchor a list of nine aliases to the one before, so 9**levels
    values from a few hundred bytes; anchor ``&l<i>`` is on line i + 1, ``key`` holds the last."""
    names = [f"l{i}" for i in range(levels)]
    lines = [f'{names[0]}: &{names[0]} ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for before, name in itertools.pairwise(names):
        lines.append(f"{name}: &{name} [{', '.join([f'*{before}'] * 9)}]")
    return "\n".join([*lines, f"{key}: *{names[-1]}", ""])


def big_workflow(blocks: int = 300, *, backwards: bool = False) -> str:
    """A legitimate workflow of about ``10 * blocks`` nodes, as a long procedure is written:
    each block fans out to two nodes and joins them, switches on the join, meets again, asks
    a model and hands over to the next block; templates name the block's own nodes, the block
    before and the first block. Every 40th block may loop back (``max_visits``), every 50th
    asks for an approval. It loads without a problem. ``backwards``: the nodes listed last
    first (the entry stays first)."""
    nodes: list[dict[str, Any]] = []
    for k in range(blocks):
        b = f"b{k}_"
        prior = f"nodes.b{k - 1}_end.output" if k else "inputs.device_id"
        after = [f"b{k + 1}_start"] if k + 1 < blocks else []
        looped = k % 40 == 39
        nodes += [
            {
                "id": f"{b}start",
                "kind": "tool",
                "tool": "lookup",
                "arguments": {"device_id": "{{ inputs.device_id }}", "prior": f"{{{{ {prior} }}}}"},
                "next": [f"{b}left", f"{b}right"],
                **({"max_visits": 3} if looped else {}),
            },
            {
                "id": f"{b}left",
                "kind": "set",
                "values": {"x": f"{{{{ nodes.{b}start.output.value }}}}"},
                "next": f"{b}both",
            },
            {
                "id": f"{b}right",
                "kind": "tool",
                "tool": "lookup",
                "arguments": {"device_id": f"{{{{ nodes.{b}start.output.id }}}}"},
                "next": f"{b}both",
            },
            {"id": f"{b}both", "kind": "join", "next": f"{b}check"},
            {
                "id": f"{b}check",
                "kind": "switch",
                "cases": [{"when": f"nodes.{b}both.output.{b}left.x > 1", "goto": f"{b}high"}],
                "otherwise": f"{b}low",
            },
            {
                "id": f"{b}high",
                "kind": "set",
                "values": {"level": "high", "v": f"{{{{ nodes.{b}left.output.x }}}}"},
                "next": f"{b}meet",
            },
            {
                "id": f"{b}low",
                "kind": "set",
                "values": {"level": "low", "v": f"{{{{ nodes.{b}right.output.value }}}}"},
                "next": f"{b}meet",
            },
            {
                "id": f"{b}meet",
                "kind": "set",
                "values": {"v": f"{{{{ (nodes.{b}high or nodes.{b}low).output.v }}}}"},
                "next": f"{b}ask",
            },
            {
                "id": f"{b}ask",
                "kind": "llm",
                "prompt": f"Summarise {{{{ nodes.{b}meet.output.v }}}} after {{{{ {prior} }}}} "
                "for {{ inputs.device_id }}, first seen as {{ nodes.b0_start.output.id }}.",
                "next": f"{b}end",
            },
        ]
        if k % 50 == 49:
            nodes[-1]["next"] = f"{b}gate"
            summary = f"Go on after {{{{ nodes.{b}ask.output }}}}?"
            nodes.append(
                {"id": f"{b}gate", "kind": "approval", "summary": summary, "next": f"{b}end"}
            )
        if looped:
            again = {"when": f"nodes.{b}ask.output == 'again'", "goto": f"{b}start"}
            end = {"id": f"{b}end", "kind": "switch", "cases": [again]}
            nodes.append(end | ({"otherwise": after[0]} if after else {}))
        else:
            values = {"v": f"{{{{ nodes.{b}ask.output }}}}"}
            nodes.append({"id": f"{b}end", "kind": "set", "values": values, "next": after})
    if backwards:
        nodes = [nodes[0], *reversed(nodes[1:])]
    spec = {
        "name": "big",
        "description": "A long procedure.",
        "inputs": {"device_id": {"type": "string"}},
        "nodes": nodes,
        "outputs": {"summary": "{{ nodes.b0_end.output }}"},
    }
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)  # libyaml's: 10x faster
    return yaml.dump(spec, Dumper=dumper, sort_keys=False, allow_unicode=True, width=100)
