"""Typed events a run emits; the API layer turns them into SSE lines."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import AIMessage


@dataclass(frozen=True)
class Token:
    """A piece of the answer text as the model produced it."""

    text: str
    node: str


@dataclass(frozen=True)
class ReasoningSummary:
    """A piece of a reasoning model's summary of its thinking: for the run's trace, never
    part of the answer."""

    text: str
    node: str


@dataclass(frozen=True)
class RouteDecided:
    """What will answer this message, and why (candidates with their scores)."""

    kind: str
    target: str | None
    by: str
    candidates: list[dict[str, Any]] = field(default_factory=list)
    skills: list[str] = field(default_factory=list)
    reason: str = ""
    offered: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class NodeStarted:
    """A graph node (or a planned task, or a workflow's node) began."""

    node: str
    task_id: str | None = None
    workflow: str | None = None


@dataclass(frozen=True)
class NodeFinished:
    """A graph node (or a planned task) ended."""

    node: str
    task_id: str | None = None
    ok: bool = True
    ms: float = 0.0
    workflow: str | None = None
    error: str | None = None
    output: str | None = None  # a workflow node's output, shortened


@dataclass(frozen=True)
class ToolCalled:
    """A tool call is about to run."""

    tool: str
    arguments: dict[str, Any]
    call_id: str
    task_id: str | None = None


@dataclass(frozen=True)
class ToolReturned:
    """A tool call ended (``ok`` false for a readable tool error)."""

    tool: str
    call_id: str
    ok: bool
    content: str
    task_id: str | None = None


@dataclass(frozen=True)
class ErrorRaised:
    """Something failed inside the run without ending it (a task, a tie-break, a budget)."""

    code: str
    message: str
    task_id: str | None = None


@dataclass(frozen=True)
class ApprovalRequired:
    """A workflow run waits for a person's decision (``POST /v1/approvals/{approval_id}``)."""

    approval_id: str
    run_id: str
    node: str
    summary: str
    data: Any = None
    workflow: str = ""  # the workflow of the run that waits
    asked: float | None = None  # when it came to wait (epoch seconds)


@dataclass(frozen=True)
class RunFinished:
    """The run ended; ``message`` is the answer given to the user."""

    thread_id: str
    run_id: str
    message: AIMessage
    usage: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class RunFailed:
    """The run stopped on an error; the thread keeps everything written before it."""

    thread_id: str
    run_id: str
    code: str
    message: str
    details: dict[str, Any] = field(default_factory=dict)


Event = (
    Token
    | ReasoningSummary
    | RouteDecided
    | NodeStarted
    | NodeFinished
    | ToolCalled
    | ToolReturned
    | ErrorRaised
    | ApprovalRequired
    | RunFinished
    | RunFailed
)

CUSTOM_EVENTS: dict[str, type[Any]] = {
    "route": RouteDecided,
    "token": Token,
    "node_started": NodeStarted,
    "node_finished": NodeFinished,
    "tool_called": ToolCalled,
    "tool_returned": ToolReturned,
    "error": ErrorRaised,
    "approval_required": ApprovalRequired,
    "reasoning_summary": ReasoningSummary,
}


def from_custom(payload: dict[str, Any]) -> Event | None:
    """The typed event of a payload written with ``agents.run.emit``."""
    kind = CUSTOM_EVENTS.get(str(payload.get("type")))
    if kind is None:
        return None
    fields = {k: v for k, v in payload.items() if k != "type"}
    event: Event = kind(**fields)
    return event


def event_name(event: Event) -> str:
    """The event's type as clients see it (``RouteDecided`` is ``route_decided``)."""
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in type(event).__name__)[1:]


def answer_event(kind: str, data: dict[str, Any]) -> Token | RunFinished | RunFailed | None:
    """The answer's events back from their type and data (as ``event_data`` wrote them,
    another process's run read through Redis); None for the other kinds."""
    if kind == "token":
        return Token(str(data.get("text", "")), str(data.get("node", "")))
    if kind == "run_finished":
        message = AIMessage(content=str(data.get("answer") or ""))
        usage = dict(data.get("usage") or {})
        return RunFinished(data["thread_id"], data["run_id"], message, usage)
    if kind == "run_failed":
        return RunFailed(
            data["thread_id"],
            data["run_id"],
            str(data.get("code", "")),
            str(data.get("message", "")),
            dict(data.get("details") or {}),
        )
    return None


def event_data(event: Event) -> dict[str, Any]:
    """The event's fields as JSON-ready data (a finished run: its answer's text and usage)."""
    if isinstance(event, RunFinished):
        return {
            "thread_id": event.thread_id,
            "run_id": event.run_id,
            "answer": event.message.text,
            "usage": event.usage,
        }
    # Most events (tokens, node and tool results) hold only plain values: read them as they
    # are; ``asdict`` walks and copies each value recursively (a token is sent many times).
    names = _NAMES.get(type(event))
    if names is None:
        names = _NAMES[type(event)] = tuple(f.name for f in dataclasses.fields(event))
    values = {name: getattr(event, name) for name in names}
    if all(type(v) in _PLAIN for v in values.values()):
        return values
    return dataclasses.asdict(event)


_PLAIN = frozenset({str, int, float, bool, type(None)})
_NAMES: dict[type, tuple[str, ...]] = {}  # each event type's field names, in order
