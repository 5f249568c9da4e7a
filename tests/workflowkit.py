"""Workflows written in a test, served as the registry serves loaded ones."""

from __future__ import annotations

import itertools
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from agents.errors import WorkflowLoadError, WorkflowNotFound, WorkflowProblem
from agents.workflows.flow import Flow, flow_of
from agents.workflows.loader import load_workflow
from agents.workflows.spec import WorkflowSpec


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
