"""One run of the conversation graph: its context, its budget, its event stream.

Used alike by the router, the graph's nodes and (next) the workflow engine, so it depends on
none of them. Values here travel beside the state and are never persisted.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Protocol, TypedDict

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.runnables import RunnableConfig
from langgraph.config import get_stream_writer
from langgraph.runtime import get_runtime

from agents.errors import BudgetExceeded


class RunOptions(TypedDict, total=False):
    """How to run a turn (every key optional).

    Attributes:
        profile: Model profile for this run (run config, not state).
        skill: Answer with this skill (explicit target).
        workflow: Run this workflow (explicit target).
        callbacks: LangChain callback handlers for this run (tracing, timing).
        idempotency_key: The client's key for this request (an ``Idempotency-Key``).
        owner: Who the thread belongs to, recorded when the run creates it.
        agent: The agent acting for the owner (on-behalf-of), recorded beside it.
        guard: The user the thread must belong to, checked again once the run holds the
            thread (a thread made meanwhile by another user fails the run, unread).
        run_id: The new run's id (default: made up), when the caller had to know it first
            (an ``Idempotency-Key`` claimed for it across processes).
    """

    profile: str | None
    skill: str | None
    workflow: str | None
    callbacks: list[BaseCallbackHandler] | None
    idempotency_key: str | None
    owner: str | None
    agent: str | None
    guard: str | None
    run_id: str | None


class StartOptions(RunOptions, total=False):
    """``RunOptions``, and what to do when the thread answers another message:
    ``if_busy="enqueue"`` (the default) runs it after, ``"reject"`` raises ThreadBusy."""

    if_busy: str


@dataclass(frozen=True)
class RunLimits:
    """Model and tool calls one run may spend in all; ``None`` is no limit (the service
    always sets both, from ``SKILLDESK_MAX_MODEL_CALLS`` and ``SKILLDESK_MAX_TOOL_CALLS``)."""

    max_model_calls: int | None = None
    max_tool_calls: int | None = None


@dataclass
class RunBudget:
    """What one run has spent of its limits, shared by every node and parallel expert."""

    limits: RunLimits = field(default_factory=RunLimits)
    model_calls: int = 0
    tool_calls: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def spend_model_call(self) -> None:
        """Count one model call; raises BudgetExceeded past the limit."""
        with self._lock:
            _check(self.model_calls, self.limits.max_model_calls, "model calls")
            self.model_calls += 1

    def spend_tool_call(self) -> None:
        """Count one tool call; raises BudgetExceeded past the limit."""
        with self._lock:
            _check(self.tool_calls, self.limits.max_tool_calls, "tool calls")
            self.tool_calls += 1


def _check(spent: int, limit: int | None, what: str) -> None:
    if limit is not None and spent >= limit:
        raise BudgetExceeded(f"this run reached its limit of {limit} {what}")


class Recorded(Protocol):
    """What a run recorded to answer its message again after a crash (``agents/replies.py``),
    of no use once the message is answered."""

    async def forget(self) -> None:
        """Delete the records."""
        ...


@dataclass
class RunContext:
    """LangGraph runtime context of one run (``graph.astream(..., context=RunContext())``).

    Attributes:
        thread_id: The conversation.
        run_id: This run.
        profile: Model profile for the run's model calls (``None``: the default profile).
        target_skill: A skill the request named (explicit target).
        target_workflow: A workflow the request named (explicit target).
        budget: What the run may still spend.
        turn_id: The id of the user message this run answers: a run that answers it again
            (the message resent after a crash) gives its side effects the same keys.
        resumed: The run goes on from a checkpoint a crash left (no new input).
        again: The run answers a message a run before it began to answer (resumed, or the
            message resent): the model replies that run recorded are acted on again
            (``agents/replies.py``), not asked for anew.
        replayed: The run gave the answer the thread holds to the turn its request's
            Idempotency-Key began before (``agents/turn_keys.py``): nothing ran.
        attempt: Which try of a workflow node this is (0: the first): a retry after a
            failure asks the model anew, a resumed run replays each try's replies.
        recorded: The run's tool loops that recorded (or replayed) model replies: once the
            turn is answered, their records are forgotten (``Recorded.forget``).
    """

    thread_id: str = ""
    run_id: str = ""
    profile: str | None = None
    target_skill: str | None = None
    target_workflow: str | None = None
    budget: RunBudget = field(default_factory=RunBudget)
    turn_id: str = ""
    resumed: bool = False
    again: bool = False
    replayed: bool = False
    attempt: int = 0
    recorded: list[Recorded] = field(default_factory=list, repr=False)
    _calls: Counter[str] = field(default_factory=Counter, repr=False)
    _calls_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def occurrence(self, tool: str, arguments: dict[str, Any]) -> int:
        """How many identical calls (tool and arguments) this run made before this one."""
        key = f"{tool}|{json.dumps(arguments, sort_keys=True, default=str)}"
        with self._calls_lock:
            seen = self._calls[key]
            self._calls[key] += 1
        return seen


def current_context() -> RunContext:
    """The running graph's context (a default one when a graph is run without it)."""
    ctx = get_runtime(RunContext).context
    return ctx if isinstance(ctx, RunContext) else RunContext()


# The conversation graph's nodes whose model calls write the answer: their tokens stream;
# other nodes' (the planner, parallel experts, the router's tie-break, a workflow) do not.
ANSWER_NODES = frozenset({"assistant", "expert", "aggregate", "joint_expert"})
_ANSWERING: ContextVar[str | None] = ContextVar("skilldesk_answering", default=None)


@contextmanager
def answering(node: str) -> Iterator[None]:
    """Inside, model calls stream their text as ``node``'s tokens when ``node`` is one of
    ``ANSWER_NODES``; any other node (a workflow run inside one included) streams none."""
    token = _ANSWERING.set(node if node in ANSWER_NODES else None)
    try:
        yield
    finally:
        _ANSWERING.reset(token)


def answering_node() -> str | None:
    """The answering node whose tokens a model call made here streams, if any."""
    return _ANSWERING.get()


def emit(event_type: str, /, **data: Any) -> None:
    """Send a typed event to the run's stream (a no-op outside a streamed run)."""
    try:
        writer = get_stream_writer()
    except RuntimeError:
        return
    writer({"type": event_type, **data})


def thread_config(
    thread_id: str,
    *,
    run_id: str | None = None,
    callbacks: list[BaseCallbackHandler] | None = None,
) -> Any:
    """The graph's config for a thread (and a run: its id, its callback handlers)."""
    config: RunnableConfig = {"configurable": {"thread_id": thread_id}}
    if run_id:
        config["run_id"] = uuid.UUID(run_id)
        config["metadata"] = {"run_id": run_id}
    if callbacks:
        config["callbacks"] = callbacks
    return config
