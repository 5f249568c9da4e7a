"""The events of a run as ``POST /v1/threads/{id}/runs/stream`` sends them: each is one
Server-Sent Event whose ``event:`` line names its type and whose ``data:`` is this JSON."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from app.api.schemas.thread_view import RouteCandidatePublic


class TaskScoped(BaseModel):
    """An event that may belong to one planned task."""

    task_id: str | None = Field(description="The planned task it belongs to; null outside one.")


class NodeStartedEvent(TaskScoped):
    """A graph node (or a planned task, or a workflow's node) began."""

    node: str = Field(description="The node: `route`, `expert`, `assistant`, `task`...")
    workflow: str | None = Field(description="The workflow whose node it is; null outside one.")


class NodeFinishedEvent(TaskScoped):
    """A graph node (or a planned task) ended."""

    node: str = Field(description="The node.")
    ok: bool = Field(description="Whether it succeeded.")
    ms: float = Field(description="How long it ran, in milliseconds.")
    workflow: str | None = Field(description="The workflow whose node it is; null outside one.")
    error: str | None = Field(description="Why it failed (a workflow's node), else null.")
    output: str | None = Field(description="A workflow node's output, shortened; else null.")


class ApprovalRequiredEvent(BaseModel):
    """A workflow run waits for a person: decide with `POST /v1/approvals/{approval_id}`."""

    approval_id: str = Field(description="The approval's id.")
    run_id: str = Field(description="The workflow run that waits.")
    node: str = Field(description="The approval node.")
    summary: str = Field(description="What is to be approved.")
    data: Any = Field(description="The data behind it.")
    workflow: str = Field(description="The workflow of the run that waits.")
    asked: float | None = Field(description="When the run came to wait (epoch seconds).")


class RouteDecidedEvent(BaseModel):
    """What will answer this message, and why."""

    kind: str = Field(
        description="`skill`, `candidates` (one expert holds close candidates; the model "
        "picks), `multi`, `workflow` or `general`."
    )
    target: str | None = Field(description="The skill or workflow chosen, if one was.")
    by: str = Field(description="How it was decided: `explicit`, `retrieval`, `model`...")
    candidates: list[RouteCandidatePublic] = Field(description="What retrieval found, best first.")
    skills: list[str] = Field(description="Skills the route uses.")
    reason: str = Field(description="Why, in a few words.")
    offered: list[str] = Field(
        default_factory=list,
        description="Skills whose definitions the answering prompt holds from the start: the "
        "candidates of `candidates`, the general assistant's best hits.",
    )


class ToolCalledEvent(TaskScoped):
    """A tool call is about to run."""

    tool: str = Field(description="The tool.")
    arguments: dict[str, Any] = Field(description="Its arguments.")
    call_id: str = Field(description="Pairs it with its `tool_returned`.")


class ToolReturnedEvent(TaskScoped):
    """A tool call ended."""

    tool: str = Field(description="The tool.")
    call_id: str = Field(description="The `tool_called` it answers.")
    ok: bool = Field(description="False for a readable tool error.")
    content: str = Field(description="The result or the error, as the model reads it.")


class TokenEvent(BaseModel):
    """A piece of the answer as the model produced it."""

    text: str = Field(description="The text to append.")
    node: str = Field(description="The node answering.")


class ReasoningSummaryEvent(BaseModel):
    """A piece of a reasoning model's summary of its thinking (where the provider sends
    one): for the run's trace, never part of the answer."""

    text: str = Field(description="The text to append to the summary.")
    node: str = Field(description="The node whose model is thinking.")


class ErrorRaisedEvent(TaskScoped):
    """Something failed inside the run without ending it (a task, a tie-break, a budget)."""

    code: str = Field(description="A stable code.")
    message: str = Field(description="What went wrong.")


class RunEnd(BaseModel):
    """The last event of a run."""

    thread_id: str = Field(description="The thread.")
    run_id: str = Field(description="The run.")


class RunFinishedEvent(RunEnd):
    """The run ended with an answer."""

    answer: str = Field(description="The answer given to the user.")
    usage: dict[str, int] = Field(
        description="This run's `input_tokens`, `output_tokens`, `total_tokens`, `model_calls`;"
        " `reasoning_tokens` and `cost_micro_usd` (millionths of a US dollar) when known."
    )


class RunFailedEvent(RunEnd):
    """The run stopped on an error; the thread keeps everything written before it."""

    code: str = Field(description="`model_unavailable`, `model_timeout`, `internal_error`...")
    message: str = Field(description="What went wrong and what to check.")
    details: dict[str, Any] = Field(description="More about it (the model profile, say).")


class ReconnectEvent(BaseModel):
    """The process serving the stream is stopping; the run goes on. Read the rest from `url`
    (any process, through the load balancer) with `Last-Event-ID: <last_event_id>`, after
    the event's `retry:` milliseconds. Sent only with Redis; it has no `id:`."""

    thread_id: str = Field(description="The thread.")
    run_id: str = Field(description="The run.")
    url: str = Field(description="The run's event stream: `/v1/threads/{id}/runs/{run_id}/stream`.")
    last_event_id: str = Field(description="The last sequence id this stream sent.")
    reason: str = Field(description="Why: `shutting_down`.")


# The event names, as the stream's ``event:`` lines carry them, in a run's usual order.
RUN_EVENTS: dict[str, type[BaseModel]] = {
    "node_started": NodeStartedEvent,
    "route_decided": RouteDecidedEvent,
    "tool_called": ToolCalledEvent,
    "tool_returned": ToolReturnedEvent,
    "reasoning_summary": ReasoningSummaryEvent,
    "token": TokenEvent,
    "error_raised": ErrorRaisedEvent,
    "approval_required": ApprovalRequiredEvent,
    "node_finished": NodeFinishedEvent,
    "run_finished": RunFinishedEvent,
    "run_failed": RunFailedEvent,
    "reconnect": ReconnectEvent,
}
