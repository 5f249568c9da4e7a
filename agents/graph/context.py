"""Per-run values that travel beside the state (never persisted): budget, target, profile."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from langgraph.config import get_stream_writer


class BudgetExceeded(Exception):
    """The run used up its model or tool calls."""


@dataclass
class RunBudget:
    """Model and tool calls one run may spend, shared by every node and parallel expert."""

    max_model_calls: int = 12
    max_tool_calls: int = 24
    model_calls: int = 0
    tool_calls: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def spend_model_call(self) -> None:
        """Count one model call; raises BudgetExceeded past the limit."""
        self._spend("model_calls", self.max_model_calls, "model calls")

    def spend_tool_call(self) -> None:
        """Count one tool call; raises BudgetExceeded past the limit."""
        self._spend("tool_calls", self.max_tool_calls, "tool calls")

    def _spend(self, counter: str, limit: int, what: str) -> None:
        with self._lock:
            if getattr(self, counter) >= limit:
                raise BudgetExceeded(f"this run reached its limit of {limit} {what}")
            setattr(self, counter, getattr(self, counter) + 1)


@dataclass
class RunContext:
    """LangGraph runtime context of one run (``graph.astream(..., context=RunContext())``)."""

    thread_id: str = ""
    run_id: str = ""
    profile: str | None = None
    target_skill: str | None = None
    target_workflow: str | None = None
    budget: RunBudget = field(default_factory=RunBudget)


def emit(event_type: str, /, **data: Any) -> None:
    """Send a typed event to the run's stream (a no-op outside a streamed run)."""
    try:
        writer = get_stream_writer()
    except RuntimeError:
        return
    writer({"type": event_type, **data})
