"""Typed events a run emits; the API layer turns them into SSE lines."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import AIMessage


@dataclass(frozen=True)
class Token:
    """A piece of the answer text as the model produced it."""

    text: str
    node: str


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


Event = Token | RunFinished | RunFailed
