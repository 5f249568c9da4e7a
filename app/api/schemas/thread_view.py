"""A thread as ``GET /v1/threads/{id}`` shows it: its messages (with their tool calls and
failed runs), how its last message was routed, the supervisor's plan, its attachments, usage
and the approvals its workflow runs wait for."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from agents.state.schema import Attachment
from app.api.schemas.workflows import ApprovalPublic


class ToolCallRecordPublic(BaseModel):
    """A tool call an assistant message made."""

    id: str | None = Field(description="The call's id; its result's `tool_call_id`.")
    name: str = Field(description="The tool called.")
    arguments: dict[str, Any] = Field(description="The arguments it was called with.")
    unreadable_arguments: str | None = Field(
        None,
        description="Arguments the model wrote that are not a JSON object, as written: the "
        "call was refused, and its result says why (`arguments` is then empty).",
    )


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
    waiting_approvals: list[ApprovalPublic] = Field(
        [],
        description="Approvals that workflow runs on the thread wait for, newest first (at "
        "most 100), as the inbox (`GET /v1/approvals`) lists them: shown to whoever may read "
        "the thread, the `approve` scope or not; deciding one takes that scope. Empty when "
        "none waits.",
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
