"""Live reload of the workflows folder: a saved file serves within two seconds."""

from __future__ import annotations

import asyncio

from agents.watch import Watcher, start_watching, stop_watching
from agents.workflows.loader import SUFFIXES
from agents.workflows.registry import WorkflowRegistry, WorkflowReport


def start_workflow_watcher(registry: WorkflowRegistry) -> Watcher:
    """Reload ``registry`` (off the event loop) whenever a workflow file in its folder is
    written, added or removed; ``stop_workflow_watcher`` ends it."""

    async def reload() -> WorkflowReport:
        return await asyncio.to_thread(registry.reload)

    return start_watching(
        registry.directory,
        reload,
        topic="workflows",
        recursive=False,
        accept=lambda path: path.endswith(SUFFIXES),
    )


stop_workflow_watcher = stop_watching
