"""Workflows, their runs and approvals over HTTP."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from app.api.schemas.threads import THREAD_ID_PATTERN

RunStatus = Literal["RUNNING", "WAITING", "SUCCEEDED", "FAILED", "CANCELLED"]
"""A workflow run's status."""


class WorkflowProblemPublic(BaseModel):
    """Why a workflow file failed to load (it is skipped; the others serve)."""

    file: str = Field(description="The file at fault.")
    node: str = Field(description="The node at fault, or empty.")
    line: int | None = Field(description="The line of the file, where the parser gives one.")
    message: str = Field(description="What is wrong and how to fix it.")


class WorkflowPublic(BaseModel):
    """One loaded workflow."""

    name: str
    version: int | str
    description: str
    nodes: list[str] = Field(description="The node ids, as listed.")


class WorkflowsPublic(BaseModel):
    """Every loaded workflow and the problems of the files that failed to load."""

    workflows: list[WorkflowPublic]
    errors: list[WorkflowProblemPublic]


class WorkflowDefinitionPublic(WorkflowPublic):
    """A workflow's definition and its graph."""

    definition: dict[str, Any] = Field(description="The file's content, as validated.")
    mermaid: str = Field(description="A Mermaid flowchart of the nodes and edges.")


class RunStart(BaseModel):
    """Start a run of a workflow."""

    model_config = ConfigDict(strict=True, extra="forbid")

    inputs: dict[str, Any] = Field(default_factory=dict, description="The workflow's inputs.")
    thread_id: str | None = Field(
        None, pattern=THREAD_ID_PATTERN, description="The conversation it belongs to."
    )
    stream: bool = Field(False, description="Stream the run's events (Server-Sent Events).")


class ForkRequest(BaseModel):
    """Run a finished run again from one of its nodes."""

    model_config = ConfigDict(strict=True, extra="forbid")

    node: str = Field(min_length=1, description="The node to run again from.")
    inputs: dict[str, Any] = Field(
        default_factory=dict, description="Inputs to change; the others stay as they were."
    )


class NodeRecordPublic(BaseModel):
    """How one node of a run went."""

    status: str | None = Field(
        description="`done` or `failed`; `cancelled` when the run was cancelled while the node "
        "ran (cut off: a tool call it made ran to its end, once, its result not kept here)."
    )
    ms: float | None = None
    error: str | None = None
    visits: int | None = None
    output: Any = Field(None, description="Its output (long ones shortened).")


class ApprovalPublic(BaseModel):
    """A pending approval (the approvers' inbox)."""

    approval_id: str
    node: str
    summary: str = Field(description="What is to be approved.")
    data: Any = Field(None, description="The data behind it.")
    run_id: str | None = None
    workflow: str | None = None
    thread_id: str | None = None
    asked: float | None = Field(
        None,
        description="When its run came to wait for it (Unix time); none for approvals asked "
        "before 2026-12-07.",
    )


class RunPublic(BaseModel):
    """A workflow run's execution record."""

    id: str
    workflow: str
    version: int | str
    thread_id: str | None
    parent: str | None = Field(
        None,
        description="The run it came from: `<run id>@<node>` for a fork of that run from "
        "that node, `<run id>:<node>#<visit>` for a sub-workflow that node ran; none for a "
        "run started by itself.",
    )
    status: RunStatus
    started: float
    ended: float | None
    inputs: dict[str, Any]
    outputs: dict[str, Any]
    error: str | None = Field(
        description="Why it failed or was cancelled (`cancelled by <who>` for a cancel)."
    )
    nodes: dict[str, NodeRecordPublic] = Field(
        description="How each node it ran went (a run under way: those finished so far)."
    )
    waiting: ApprovalPublic | None = Field(description="The approval it waits for, if any.")
    cancel_requested: bool = Field(
        False,
        description="A cancel was asked while it ran (`POST /v1/workflow-runs/{id}/cancel`): "
        "a run still `RUNNING` stops after its node under way.",
    )
    usage: dict[str, int] = Field(
        default_factory=dict,
        description="Its model calls' `input_tokens`, `output_tokens`, `total_tokens`, "
        "`model_calls` (and `cost_micro_usd` when priced), over the whole run.",
    )

    @field_validator("cancel_requested", mode="before")
    @classmethod
    def _asked_or_not(cls, value: Any) -> Any:
        # Records stored before 2026-12-07 could hold null where a cancel was answered (a
        # field a conditional save dropped was written as null): nothing asked.
        return False if value is None else value


class RunsPublic(BaseModel):
    """Execution records, newest first, a page at a time."""

    runs: list[RunPublic]
    next_cursor: str | None = Field(
        None, description="Where the next page starts (`cursor`); none after the last."
    )


class ApprovalsPublic(BaseModel):
    """Pending approvals."""

    approvals: list[ApprovalPublic] = Field(description="A page of them, newest first.")
    total: int = Field(description="How many wait in all.")
    next_cursor: str | None = Field(
        None, description="Where the next page starts (`cursor`); none after the last."
    )


class Decision(BaseModel):
    """An approver's decision."""

    model_config = ConfigDict(strict=True, extra="forbid")

    decision: Literal["approve", "reject"]
    by: str = Field("", max_length=200, description="Who decides (until API keys: as given).")
    comment: str = Field("", max_length=2000)


# The events of a streamed workflow run (`POST /v1/workflows/{name}/runs` with `stream: true`):
# each one Server-Sent Event whose `event:` line names its type and whose `data:` is this JSON
# (its `type` the same name).


class NodeStartedData(BaseModel):
    """A node of the workflow began."""

    type: Literal["node_started"]
    node: str = Field(description="The node's id.")
    workflow: str = Field(description="The workflow whose node it is.")


class NodeFinishedData(BaseModel):
    """A node of the workflow ended."""

    type: Literal["node_finished"]
    node: str = Field(description="The node's id.")
    workflow: str = Field(description="The workflow whose node it is.")
    ok: bool = Field(description="Whether it succeeded.")
    ms: float | None = Field(None, description="How long it ran, in milliseconds.")
    error: str | None = Field(None, description="Why it failed.")
    output: str | None = Field(None, description="Its output as one short line.")


class ToolCalledData(BaseModel):
    """A tool was called (by a `tool` node, or by an `expert` node's model)."""

    type: Literal["tool_called"]
    tool: str
    arguments: Any = Field(description="The arguments, as sent.")
    call_id: str = Field(description="Pairs it with its `tool_returned`.")
    task_id: str | None = None


class ToolReturnedData(BaseModel):
    """A tool answered."""

    type: Literal["tool_returned"]
    tool: str
    call_id: str = Field(description="The `tool_called` it answers.")
    ok: bool
    content: str = Field(description="What it returned (or its error), shortened.")
    task_id: str | None = None


class ReasoningSummaryData(BaseModel):
    """A summary of a model's reasoning (a model node's), never part of any answer."""

    type: Literal["reasoning_summary"]
    text: str
    node: str


class ApprovalRequiredData(BaseModel):
    """The run asks a person to decide: `POST /v1/approvals/{approval_id}`."""

    type: Literal["approval_required"]
    approval_id: str
    run_id: str
    node: str = Field(description="The approval node.")
    summary: str = Field(description="What is to be approved.")
    data: Any = Field(None, description="The data behind it.")
    workflow: str = Field("", description="The workflow of the run that waits.")
    asked: float | None = Field(None, description="When the run came to wait (epoch seconds).")


class WorkflowWaitingData(BaseModel):
    """The stream's last event when the run stopped to wait for a decision: it is not over.
    A decision on `approval` resumes it; `GET /v1/workflow-runs/{id}` follows it then."""

    type: Literal["workflow_waiting"]
    record: RunPublic = Field(description="The run's record, status `WAITING`.")
    approval: ApprovalPublic = Field(description="The approval it waits for.")
    replayed: bool = Field(
        False, description="A start sent again with its `Idempotency-Key`: the first run's."
    )


class WorkflowEndedData(BaseModel):
    """The stream's last event when the run is over: `SUCCEEDED`, `FAILED` or `CANCELLED`."""

    type: Literal["workflow_ended"]
    record: RunPublic = Field(description="The run's record.")
    replayed: bool = Field(
        False,
        description="A start sent again with its `Idempotency-Key`: the first run's record "
        "once it is over (a first run left under way by a process that stopped or died went "
        "on here, its events before this one).",
    )


class RunStreamErrorData(BaseModel):
    """A node's model reported an error; or, as the last event, the run failed in this
    process (its store, say): it is let go and goes on from its last step (`url`)."""

    type: Literal["error"]
    code: str
    message: str
    run_id: str | None = Field(None, description="The run, once it was under way.")
    url: str | None = Field(None, description="Where to follow it: its record.")
    task_id: str | None = None


class HandedOverData(BaseModel):
    """The last event when this process stopped before the run ended: another process (or
    this one's next start) goes on with it; follow it at `url`."""

    type: Literal["handed_over"]
    run_id: str
    url: str = Field(description="The run's record.")
    reason: str = Field(description="Why: `shutting_down`.")
    message: str


# The event names, as the stream's `event:` lines carry them, in a run's usual order.
WORKFLOW_RUN_EVENTS: dict[str, type[BaseModel]] = {
    "node_started": NodeStartedData,
    "tool_called": ToolCalledData,
    "tool_returned": ToolReturnedData,
    "reasoning_summary": ReasoningSummaryData,
    "node_finished": NodeFinishedData,
    "approval_required": ApprovalRequiredData,
    "workflow_waiting": WorkflowWaitingData,
    "workflow_ended": WorkflowEndedData,
    "error": RunStreamErrorData,
    "handed_over": HandedOverData,
}
