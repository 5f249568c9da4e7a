"""The definitions runs started with, and their compiled graphs.

A run goes on under the definition it started with, whatever its workflow's file says by the
time it resumes (renamed nodes, a new version, a file withdrawn): each definition a run starts
with is kept in the store beside the records, by its fingerprint, and read back from there
when the serving workflow is no longer the same. Graphs are compiled once per definition and
a few are kept, for the versions runs still go on under.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any, Protocol

from langgraph.graph.state import CompiledStateGraph

from agents.errors import WorkflowNotFound
from agents.state.documents import Documents
from agents.workflows.flow import Flow, flow_of
from agents.workflows.spec import WorkflowSpec

DEFINITION = "workflow_definition"  # the kind of the definitions runs started with
_GRAPHS = 32  # compiled graphs kept (a workflow's versions that runs still go on under)

Graph = CompiledStateGraph[Any, Any, Any, Any]


class LoadedWorkflow(Protocol):
    """A workflow as the registry holds it."""

    @property
    def name(self) -> str: ...

    @property
    def spec(self) -> WorkflowSpec: ...

    @property
    def flow(self) -> Flow: ...

    @property
    def fingerprint(self) -> str: ...


@dataclass(frozen=True)
class Definition:
    """A workflow as a run started with it, read back from the store."""

    name: str
    spec: WorkflowSpec
    flow: Flow
    fingerprint: str


class WorkflowSource(Protocol):
    """Where workflows come from (the registry)."""

    def get(self, name: str) -> LoadedWorkflow: ...

    def not_installed(self, spec: WorkflowSpec, done: Collection[str] = ()) -> list[str]: ...


class Definitions:
    """The definitions runs started with (kept in ``documents``) and their graphs.

    Args:
        workflows: The serving workflows (the registry).
        documents: Where definitions are kept, beside the execution records.
        compile_graph: Makes a definition's graph (the engine's ``compile_workflow``).
    """

    def __init__(
        self,
        workflows: WorkflowSource,
        documents: Documents,
        compile_graph: Callable[[LoadedWorkflow], Graph],
    ) -> None:
        self.workflows = workflows
        self.documents = documents
        self._compile = compile_graph
        self._kept: dict[str, LoadedWorkflow] = {}  # kept in the store, by id
        self._graphs: dict[tuple[str, str], Graph] = {}

    async def keep(self, workflow: LoadedWorkflow) -> None:
        """Store the definition a run starts with (once per version)."""
        key = _definition_id(workflow.name, workflow.fingerprint)
        if key in self._kept:
            return
        if await self.documents.get(DEFINITION, key) is None:
            body = {
                "name": workflow.name,
                "fingerprint": workflow.fingerprint,
                "spec": workflow.spec.model_dump(mode="json", by_alias=True),
            }
            await self.documents.put(DEFINITION, key, body)
        self._kept[key] = workflow

    async def of(self, record: dict[str, Any]) -> LoadedWorkflow:
        """The definition ``record``'s run started with: a run goes on under it, whatever the
        workflow's file says now (renamed nodes, a new version, a file withdrawn).

        Raises:
            WorkflowNotFound: a run from before definitions were kept, whose workflow is not
                serving.
        """
        name, fingerprint = record["workflow"], str(record.get("fingerprint"))
        key = _definition_id(name, fingerprint)
        known = self._kept.get(key)
        if known is not None:
            return known
        with contextlib.suppress(WorkflowNotFound):
            serving = self.workflows.get(name)
            if serving.fingerprint == fingerprint:
                return serving
        kept = await self.documents.get(DEFINITION, key)
        if kept is None:
            return self.workflows.get(name)  # a run started before definitions were kept
        spec = WorkflowSpec.model_validate(kept["spec"])
        definition = Definition(name, spec, flow_of(spec), fingerprint)
        self._kept[key] = definition
        return definition

    def graph(self, workflow: LoadedWorkflow) -> Graph:
        """``workflow``'s graph, compiled once and kept among the newest used."""
        key = (workflow.name, workflow.fingerprint)
        graph = self._graphs.pop(key, None) or self._compile(workflow)
        self._graphs[key] = graph  # the newest used last
        while len(self._graphs) > _GRAPHS:
            del self._graphs[next(iter(self._graphs))]
        return graph


def _definition_id(name: str, fingerprint: str) -> str:
    return f"{name}@{fingerprint}"
