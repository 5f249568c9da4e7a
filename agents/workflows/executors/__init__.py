"""One executor per node kind, registered in one place: ``EXECUTORS[kind]``.

An executor takes a node's context (the node, the run's template values, the services) and
returns its outcome: the output kept under the node's id, and where the run goes next. Adding
a kind is a module here with a class decorated ``@executor("kind")``; the engine is untouched.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from agents.run import Recorded
    from agents.workflows.engine import WorkflowEngine


@dataclass(frozen=True)
class RunInfo:
    """The run a node belongs to."""

    run_id: str
    workflow: str
    thread_id: str | None = None
    profile: str | None = None
    user: str | None = None  # who started it (a sub-workflow's run is theirs too)
    # Expert nodes' recorded model replies, forgotten when this stretch of the run ends.
    recorded: list[Recorded] = field(default_factory=list, compare=False, repr=False)


@dataclass(frozen=True)
class NodeContext:
    """What an executor gets for one node.

    Attributes:
        node: The node as the file declares it.
        values: The run's template values: ``inputs``, ``nodes`` (id → output, status), ``run``.
        run: The run.
        engine: The engine (its skills, model gateway, prompts, other workflows).
        visit: How many times the node ran before in this run.
        attempt: Which try of this visit it is (0: the first; ``retry`` makes more).
    """

    node: Any
    values: dict[str, Any]
    run: RunInfo
    engine: WorkflowEngine
    visit: int = 0
    attempt: int = 0


@dataclass(frozen=True)
class Outcome:
    """A node's output, and where the run goes: ``goto`` None for the node's successors, a
    list of node ids to go there instead (empty: the run ends)."""

    output: Any = None
    goto: list[str] | None = None
    usage: dict[str, int] = field(default_factory=dict)


class Executor(Protocol):
    """Runs the nodes of one kind."""

    async def run(self, ctx: NodeContext) -> Outcome:
        """The node's outcome; raises a SkilldeskError (or any exception) when it fails."""
        ...


EXECUTORS: dict[str, Executor] = {}


def executor(kind: str) -> Callable[[type[Any]], type[Any]]:
    """Register the decorated class as the executor of ``kind``."""

    def register(cls: type[Any]) -> type[Any]:
        if kind in EXECUTORS:
            raise ValueError(f"node kind {kind!r} has two executors")
        EXECUTORS[kind] = cls()
        return cls

    return register


def load_executors() -> dict[str, Executor]:
    """Every executor (importing the modules registers them)."""
    from agents.workflows.executors import (  # noqa: F401  (registration)
        approval,
        control,
        model,
        notify,
        subflow,
        tool,
    )

    return EXECUTORS
