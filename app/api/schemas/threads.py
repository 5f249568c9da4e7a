"""Native threads: a run's request and a thread's history (the run's events: ``events``)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import Query
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from agents.skills.spec import NAME_PATTERN
from agents.state.schema import Attachment
from agents.turns import MAX_MESSAGE_CHARS

THREAD_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"
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

    model_config = ConfigDict(json_schema_extra=ONE_TARGET)

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
        None, description="A model profile for this run; an unknown name means the default."
    )

    @field_validator("message")
    @classmethod
    def _some_text(cls, value: str) -> str:
        if not value.strip():
            raise PydanticCustomError("blank", "the message is empty; send the user's text")
        return value


class ToolCallRecordPublic(BaseModel):
    """A tool call an assistant message made."""

    id: str | None = Field(description="The call's id; its result's `tool_call_id`.")
    name: str = Field(description="The tool called.")
    arguments: dict[str, Any] = Field(description="The arguments it was called with.")


class FailedRunPublic(BaseModel):
    """A run that failed: its id and error."""

    run_id: str = Field(description="The run's id.")
    code: str = Field(description="The error's code (`model_error`, `run_cancelled`...).")
    message: str = Field(description="What happened, for the user.")


class ThreadMessagePublic(BaseModel):
    """One message of a thread, with its place and speaker."""

    index: int = Field(
        description="Position in the thread, from 0 (summarised messages count: the first "
        "active message's index is `summarised_messages`)."
    )
    role: Literal["human", "ai", "tool", "system"] = Field(
        description="Who said it: the user (`human`), the assistant (`ai`), a tool's result "
        "(`tool`) or instructions (`system`)."
    )
    content: str = Field(description="The message's text.")
    name: str | None = Field(None, description="The speaker's name (a tool's, say), if any.")
    tool_calls: list[ToolCallRecordPublic] | None = Field(
        None, description="Tool calls of an assistant message (only when it made some)."
    )
    tool_call_id: str | None = Field(
        None, description="The call a tool message answers (tool messages only)."
    )
    summarised: bool | None = Field(
        None,
        description="True for a message a summary took out of the active history (the "
        "model reads the summary instead); absent for active ones.",
    )
    run_id: str | None = Field(
        None,
        description="The run whose answer this is (answers of the thread's last 100 runs "
        "only): how it was reached is at `GET .../runs/{run_id}/trace`.",
    )
    failed_run: FailedRunPublic | None = Field(
        None,
        description="A run that failed after this message (the last one when it failed): "
        "its error, and how far it got at `GET .../runs/{run_id}/trace`.",
    )


class RouteCandidatePublic(BaseModel):
    """A skill or workflow that routing considered, with its scores."""

    model_config = ConfigDict(extra="allow")

    name: str = Field(description="The skill or workflow.")
    score: float = Field(description="Fused retrieval score, 0-1.")
    dense: float | None = Field(None, description="Embedding similarity (skills only).")
    keyword: float | None = Field(None, description="BM25 score, normalised (skills only).")


class RoutePublic(BaseModel):
    """What answered the thread's last message, and why (thread state ``route``)."""

    model_config = ConfigDict(extra="allow")

    kind: str = Field(
        description="`skill`, `candidates`, `multi`, `workflow` or `general`.", examples=["skill"]
    )
    by: str = Field(
        description="How it was decided: `explicit`, `retrieval`, `context`, `model`, "
        "`workflow`, `fallback`.",
        examples=["retrieval"],
    )
    target: str | None = Field(description="The skill or workflow chosen, if one was.")
    skills: list[str] = Field(description="Skills the route uses.")
    candidates: list[RouteCandidatePublic] = Field(description="What retrieval found, best first.")
    reason: str = Field(description="Why, in a few words.")
    clauses: list[dict[str, str]] | None = Field(
        None, description="For `multi`: each request of the message and its skill."
    )
    plan_id: str | None = Field(None, description="The plan in `workspace` it started.")
    offered: list[str] | None = Field(
        None, description="Skills whose definitions the answering prompt held from the start."
    )


class TaskPublic(BaseModel):
    """One planned task of a message with several requests."""

    model_config = ConfigDict(extra="allow")

    id: str | None = Field(None, description="The task's id, e.g. `t1`.")
    skill: str | None = Field(None, description="The skill that answers it.")
    instruction: str | None = Field(None, description="What the task asks.")
    depends_on: list[str] | None = Field(None, description="Tasks whose results it needs.")
    status: str | None = Field(None, description="`pending`, `done` or `failed`.")
    result: str | None = Field(None, description="The task's answer, once done.")
    error: str | None = Field(None, description="Why it failed, if it did.")


class WorkspacePublic(BaseModel):
    """The supervisor's plan for the last message with several requests (empty if none)."""

    model_config = ConfigDict(extra="allow")

    plan_id: str | None = Field(None, description="The plan's id.")
    mode: str | None = Field(None, description="`joint` (one expert) or `parallel`.")
    tasks: dict[str, TaskPublic] | None = Field(None, description="The tasks by id.")


class ThreadPublic(BaseModel):
    """A thread: its messages, how its last message was routed, loaded skills and usage.

    Optional fields are left out, rather than null, when they do not apply.
    """

    thread_id: str = Field(description="The thread's id.")
    title: str | None = Field(
        None,
        description="From its first message, or as renamed (left out for a thread "
        "from before titles).",
    )
    status: Literal["idle", "running", "failed"] | None = Field(
        None,
        description="`running` while a message is answered (left out for a thread from "
        "before records).",
    )
    run_id: str | None = Field(
        None,
        description="The run under way, while `status` is `running`: join its events at "
        "`GET /v1/threads/{id}/runs/{run_id}/stream`.",
    )
    messages: list[ThreadMessagePublic] = Field(
        description="The active messages: those the next answer reads verbatim."
    )
    summarised_messages: int = Field(
        0,
        description="Earlier messages replaced by the thread's summary (kept in its "
        "checkpoint history); 0 when nothing is summarised.",
    )
    route: RoutePublic | None = Field(description="The last route decision, if any.")
    loaded_skills: list[str] = Field(description="Skills whose definitions the thread loaded.")
    workspace: WorkspacePublic | None = Field(description="The supervisor's last plan.")
    attachments: list[AttachmentPublic] = Field(
        [], description="Files of the thread (uploaded, or made by its skills)."
    )
    usage: dict[str, int] = Field(
        description="Tokens and model calls so far: `input_tokens`, `output_tokens`, "
        "`total_tokens`, `model_calls`; `reasoning_tokens` and `cost_micro_usd` (the cost in "
        "millionths of a US dollar, of the calls whose prices are known) when there are any.",
        examples=[{"input_tokens": 30, "output_tokens": 4, "total_tokens": 34, "model_calls": 1}],
    )


class AttachmentPublic(BaseModel):
    """A file of the thread, by reference (fetch it from its `url`)."""

    id: str = Field(description="The attachment's id, e.g. `att_3f…`.")
    kind: Literal["upload", "generated"] = Field(
        description="`upload` (sent by a client) or `generated` (made by a skill)."
    )
    name: str = Field(description="The file's name.")
    media_type: str = Field(description="Its media type, e.g. `audio/wav`.")
    size: int = Field(description="Its size in bytes.")
    caption: str = Field("", description="What it is, in a few words (the model reads this).")
    created: float | None = Field(None, description="When it was stored (Unix time).")
    url: str = Field(description="Where to fetch it: `GET /v1/threads/{id}/attachments/{aid}`.")

    @classmethod
    def of(cls, thread_id: str, attachment: Attachment) -> AttachmentPublic:
        """The thread's stored ``attachment``, with where to fetch it."""
        url = f"/v1/threads/{thread_id}/attachments/{attachment.get('id')}"
        return cls.model_validate({**attachment, "url": url})


class ThreadRecordPublic(BaseModel):
    """A thread as a listing shows it."""

    thread_id: str = Field(description="The thread's id.")
    title: str = Field(description="From its first message, or as renamed.")
    created: float = Field(description="When it was created (Unix time).")
    updated: float = Field(description="When it last changed (Unix time).")
    status: Literal["idle", "running", "failed"] = Field(
        description="`running` while a message is answered, `failed` when the last run failed."
    )
    messages: int = Field(description="Messages in the thread, summarised ones included.")
    forked_from: dict[str, str] | None = Field(
        None, description="`thread_id` and `checkpoint_id` it was forked from, if it was."
    )
    owner: str | None = Field(
        None, description="The user the thread belongs to (null: made in development mode)."
    )
    agent: str | None = Field(
        None, description="The agent that made it on the owner's behalf (on-behalf-of), if one."
    )
    run_id: str | None = Field(
        None,
        description="The run under way while `status` is `running` (join its events at "
        "`GET /v1/threads/{id}/runs/{run_id}/stream`); null otherwise.",
    )

    @model_validator(mode="after")
    def _run_under_way(self) -> ThreadRecordPublic:
        if self.status != "running":
            self.run_id = None  # the record keeps the last run's id: not one under way
        return self


class ThreadListPublic(BaseModel):
    """One page of threads, newest first."""

    object: Literal["list"] = "list"
    data: list[ThreadRecordPublic]
    has_more: bool = Field(description="Whether an older page exists.")
    next_cursor: str | None = Field(
        description="Pass as `cursor` for the next page (null on the last)."
    )


class NewThread(BaseModel):
    """A thread created before its first message."""

    model_config = ConfigDict(extra="forbid")

    title: str | None = Field(
        None,
        min_length=1,
        max_length=200,
        description="Its title (default: from the first message).",
    )
    thread_id: str | None = Field(
        None, pattern=THREAD_ID_PATTERN, description="An id of the client's (default: made up)."
    )


class ThreadPatch(BaseModel):
    """What may change of a thread."""

    model_config = ConfigDict(extra="forbid")

    title: str = Field(min_length=1, max_length=200, pattern=r"\S", description="A new title.")


class ForkRequest(BaseModel):
    """Where to branch a thread: a checkpoint, or where a message was sent."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "oneOf": [
                {
                    "required": ["checkpoint_id"],
                    "properties": {"checkpoint_id": {"type": "string"}},
                },
                {
                    "required": ["before_message"],
                    "properties": {"before_message": {"type": "integer"}},
                },
            ]
        },
    )

    checkpoint_id: str | None = Field(
        None,
        min_length=1,
        max_length=200,
        description="The checkpoint to start from (`GET .../history` lists them). This or "
        "`before_message` is required: forking is never a silent copy of the latest state.",
    )
    before_message: int | None = Field(
        None,
        ge=0,
        le=10_000_000,
        description="Start from where message N (its `index` in the thread) was sent, to "
        "send an edited one instead: the checkpoint that ended the turn before it.",
    )
    thread_id: str | None = Field(
        None, pattern=THREAD_ID_PATTERN, description="The new thread's id (default: made up)."
    )

    @model_validator(mode="after")
    def _one_place(self) -> ForkRequest:
        if (self.checkpoint_id is None) == (self.before_message is None):
            raise PydanticCustomError(
                "fork_place",
                "give exactly one of checkpoint_id (from GET .../history) and before_message "
                "(a message's index)",
            )
        return self


class CheckpointPublic(BaseModel):
    """One checkpoint of a thread, as the history lists it."""

    checkpoint_id: str
    parent_id: str | None = Field(description="The checkpoint before it.")
    step: int | None = Field(description="The graph step (-1: the input of a run).")
    source: str | None = Field(description="`input`, `loop`, `update` or `fork`.")
    node: str | None = Field(description="The node whose step wrote it, when one did.")
    nodes: list[str] = Field(description="Every node of that step.")
    created: str | None = Field(description="When it was written (ISO 8601).")
    next: list[str] = Field(description="Nodes still to run from it (empty: the run ended).")
    messages: int = Field(description="Messages in the thread at this point.")
    change: str = Field(description="What it changed, in one line.")


class HistoryPublic(BaseModel):
    """A thread's checkpoints, newest first."""

    object: Literal["list"] = "list"
    data: list[CheckpointPublic]
    has_more: bool = Field(description="Whether older checkpoints exist.")


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


class ChatRunPublic(BaseModel):
    """One run of a thread: its status and how far its events go."""

    id: str = Field(description="The run's id.")
    thread_id: str = Field(description="Its thread.")
    status: Literal["queued", "running", "interrupted", "succeeded", "failed", "cancelled"] = Field(
        description="`queued` (waiting for the thread), `running`, `interrupted` (waiting "
        "for an approval), `succeeded`, `failed` or `cancelled`."
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


# A listing's page cursor: the last item's time, then its id (``Documents.find_page``). The
# pattern admits only what parses, so a cursor the service did not give is a 400 naming it.
Cursor = Annotated[
    str | None,
    Query(
        description="`next_cursor` of the previous page.",
        pattern=r"^-?[0-9]+(\.[0-9]+)?(e[+-]?[0-9]+)? .+$",
    ),
]
