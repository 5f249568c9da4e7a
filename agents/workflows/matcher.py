"""The interface a workflow engine plugs into the router with."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class WorkflowMatch:
    """A workflow whose intent matches a message (keywords, example embeddings)."""

    name: str
    score: float
    reason: str = ""


class WorkflowMatcher(Protocol):
    """Finds the workflow a message asks for, if any; names the installed ones."""

    def match(self, text: str) -> WorkflowMatch | None: ...

    def names(self) -> list[str]: ...


class NoWorkflows:
    """The matcher while no workflow engine is installed."""

    def match(self, text: str) -> WorkflowMatch | None:
        """Never matches."""
        return None

    def names(self) -> list[str]:
        """No workflows."""
        return []
