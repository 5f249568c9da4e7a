"""Workflows written in a test, served as the registry serves loaded ones."""

from __future__ import annotations

from dataclasses import dataclass

import yaml

from agents.workflows.flow import Flow, flow_of
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

    def get(self, name: str) -> Loaded:
        """The workflow ``name``."""
        return self.loaded[name]
