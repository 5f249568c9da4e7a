"""A thread's runs: the request of one (a message, and what should answer it), the run as
its status shows it, and its trace; the response headers of a turn."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema, field_validator
from pydantic_core import PydanticCustomError

from agents.skills.spec import NAME_PATTERN
from agents.turns import MAX_MESSAGE_CHARS
from app.api.schemas.threads import THREAD_ID_PATTERN

RUN_HEADERS = {  # the response headers of a turn, as OpenAPI documents them
    "X-Thread-Id": {
        "description": "The thread that holds the conversation (the request's, or a new one).",
        "schema": {"type": "string", "pattern": THREAD_ID_PATTERN},
    },
    "X-Run-Id": {
        "description": "The run that answers (`GET /v1/threads/{id}/runs/{run_id}`).",
        "schema": {"type": "string"},
    },
}

# Documented only: a name that breaks the pattern names no installed skill, and the service
# answers it as it answers any unknown skill (400 `unknown_skill`, which says where to look).
SkillName = Annotated[
    str, WithJsonSchema({"type": "string", "pattern": NAME_PATTERN, "maxLength": 64})
]
WorkflowName = Annotated[str, WithJsonSchema({"type": "string", "minLength": 1})]


# A request names a skill or a workflow to answer it, not both (400 `conflicting_targets`).
ONE_TARGET: dict[str, Any] = {
    "not": {
        "required": ["skill", "workflow"],
        "properties": {"skill": {"type": "string"}, "workflow": {"type": "string"}},
    }
}


class RunRequest(BaseModel):
    """One user message and, optionally, what should answer it (a skill or a workflow)."""

    model_config = ConfigDict(strict=True, json_schema_extra=ONE_TARGET)

    message: str = Field(
        max_length=MAX_MESSAGE_CHARS,
        description="The user's message: some text that is not only whitespace.",
        # The check is the validator below, whose error says what to send.
        json_schema_extra={"minLength": 1, "pattern": r"\S"},
    )
    skill: SkillName | None = Field(
        None, description="Answer with this installed skill (400 `unknown_skill` otherwise)."
    )
    workflow: WorkflowName | None = Field(
        None, description="Run this installed workflow (400 `unknown_workflow` otherwise)."
    )
    model: str | None = Field(
        None,
        description="A model profile for this run (400 `unknown_model`, naming the profiles, "
        "for a name that is none; without it the default profile answers), or a target as "
        "`GET /v1/models` lists them: `skilldesk`, `skilldesk/workflow/NAME`, "
        "`skilldesk/skill/NAME`.",
    )

    @field_validator("message")
    @classmethod
    def _some_text(cls, value: str) -> str:
        if not value.strip():
            raise PydanticCustomError("blank", "the message is empty; send the user's text")
        return value


class RunCreate(RunRequest):
    """A run of one message on the thread, followed or not."""

    model_config = ConfigDict(extra="forbid")

    stream: bool = Field(
        False,
        description="Answer with the run's events (SSE) instead of the run (202) at once.",
    )
    if_busy: Literal["reject", "enqueue"] = Field(
        "enqueue",
        description="When the thread is answering another message: `reject` (409 "
        "`thread_busy`) or `enqueue` (the run waits, status `queued`, and runs after it).",
    )
    cancel_on_disconnect: bool = Field(
        False,
        description="With `stream`: cancel the run when the client disconnects (by default "
        "it goes on, and its answer is in the thread afterwards).",
    )


class RunErrorPublic(BaseModel):
    """How a run failed."""

    code: str = Field(description="A stable code (`model_error`, `run_cancelled_by_request`...).")
    message: str = Field(description="What happened.")


class RunApprovalPublic(BaseModel):
    """The approval an interrupted run ended waiting for."""

    approval_id: str = Field(description="Decide it with `POST /v1/approvals/{approval_id}`.")
    workflow_run_id: str = Field(description="The workflow run the decision resumes.")


class ChatRunPublic(BaseModel):
    """One run of a thread: its status and how far its events go."""

    id: str = Field(description="The run's id.")
    thread_id: str = Field(description="Its thread.")
    status: Literal["queued", "running", "interrupted", "succeeded", "failed", "cancelled"] = Field(
        description="`queued` (waiting for the thread), `running`, `interrupted` (it ended "
        "waiting for an approval: `approval` names it and the workflow run its decision "
        "resumes; that run goes on, this one stays `interrupted`), `succeeded`, `failed` or "
        "`cancelled`."
    )
    created: float = Field(description="When it was asked for (Unix time).")
    started: float | None = Field(description="When it started running.")
    ended: float | None = Field(description="When it ended.")
    events: int = Field(description="Events so far: the last sequence id sent.")
    answer: str | None = Field(description="The answer, once it succeeded.")
    error: RunErrorPublic | None = Field(description="How it failed or was cancelled.")
    cancel_requested: bool = Field(description="A cancel was asked for.")
    resumed_as: str | None = Field(
        None,
        description="A run cut off by a process that stopped or died goes on from its last "
        "step as this run (with Redis; its stream ended with a `reconnect` event to it).",
    )
    approval: RunApprovalPublic | None = Field(
        None,
        description="An `interrupted` run's approval and the workflow run it waits in: "
        "`GET /v1/workflow-runs/{workflow_run_id}` follows that run to its end.",
    )
    usage: dict[str, int] | None = Field(
        None,
        description="What the run used, once it succeeded: tokens, model calls and, for calls "
        "whose price is known, `cost_micro_usd` (millionths of a US dollar).",
    )


class TraceEventPublic(BaseModel):
    """One event of a run's trace, as the run's stream sent it (tokens left out)."""

    type: str = Field(description="The event's type: `route_decided`, `node_finished`...")
    data: dict[str, Any] = Field(description="Its data, long values cut short.")


class RunTracePublic(BaseModel):
    """How a run's answer was reached, kept after the run: its events but the tokens."""

    run_id: str = Field(description="The run's id.")
    thread_id: str = Field(description="Its thread.")
    status: str = Field(
        description="`succeeded`, `interrupted` (it waits for an approval) or `failed`."
    )
    started: float | None = Field(description="When it started (Unix time).")
    ended: float | None = Field(description="When it ended.")
    answer_id: str | None = Field(description="The id of the answer it gave, if it gave one.")
    events: list[TraceEventPublic] = Field(
        description="Its events in order: route, nodes with timings, tool calls with "
        "arguments and results, errors, and how it ended (with its usage)."
    )
