"""Threads as resources: their ids, records and listings, creating, renaming and forking
one, its checkpoint history (what ``GET /v1/threads/{id}`` shows is in ``thread_view.py``, a
run's request and its records in ``runs.py``, a listing's page cursor in ``deps.py``)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

THREAD_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"


# The same rule as the OpenAPI document states it (ECMA-262 and Python both read it): no C0 or
# C1 control, no line or paragraph separator; a new title also has a character to show.
_NOT_CONTROL = r"[^\x00-\x1f\x7f-\x9f\u2028\u2029]"
ONE_LINE = f"^{_NOT_CONTROL}*$"
SOME_TEXT = f"^{_NOT_CONTROL}*[^\\s\\x00-\\x1f\\x7f-\\x9f]{_NOT_CONTROL}*$"


def _control(char: str) -> bool:
    """C0 and C1 controls, DEL, and Unicode's line and paragraph separators."""
    return ord(char) < 32 or 127 <= ord(char) < 160 or char in "\u2028\u2029"


def _one_line(title: str | None) -> str | None:
    """A title is one line of text: a control character (a line break, a NUL) would break
    the listings that show it (the page, ``skilldesk threads list``)."""
    if title is not None and any(_control(c) for c in title):
        raise PydanticCustomError(
            "title_control_character",
            "a title is one line of text: no line breaks, tabs or other control characters",
        )
    return title


OneLine = AfterValidator(_one_line)


def _whole(value: object) -> object:
    """A whole number sent as a float (``2.0``) is the integer JSON Schema says it is."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


WholeNumber = BeforeValidator(_whole)


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

    model_config = ConfigDict(strict=True, extra="forbid")

    title: Annotated[str | None, OneLine] = Field(
        None,
        min_length=1,
        max_length=200,
        description="Its title (default: from the first message): one line of text.",
        json_schema_extra={"pattern": ONE_LINE},
    )
    thread_id: str | None = Field(
        None, pattern=THREAD_ID_PATTERN, description="An id of the client's (default: made up)."
    )


class ThreadPatch(BaseModel):
    """What may change of a thread."""

    model_config = ConfigDict(strict=True, extra="forbid")

    title: Annotated[str, OneLine] = Field(
        min_length=1,
        max_length=200,
        pattern=r"\S",
        description="A new title: one line of text.",
        json_schema_extra={"pattern": SOME_TEXT},
    )


class ForkRequest(BaseModel):
    """Where to branch a thread: a checkpoint, or where a message was sent."""

    model_config = ConfigDict(
        strict=True,
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
    before_message: Annotated[int | None, WholeNumber] = Field(
        None,
        ge=0,
        le=10_000_000,
        description="Start from where message N (its `index` in the thread) was sent, to "
        "send an edited one instead: the checkpoint that ended the turn before it.",
    )
    thread_id: str | None = Field(
        None, pattern=THREAD_ID_PATTERN, description="The new thread's id (default: made up)."
    )
    title: Annotated[str | None, OneLine] = Field(
        None,
        min_length=1,
        max_length=200,
        pattern=r"\S",
        description="The new thread's title: one line of text (default: the source's with "
        "`(fork)` after it, or `(edited)` with `edit`, numbered when the user has a thread "
        "of that name: `(edited 2)`).",
        json_schema_extra={"pattern": SOME_TEXT},
    )
    edit: bool = Field(
        False,
        description="The fork is for an edited message (sent to it next): named "
        "`<source title> (edited)` rather than `(fork)`, when no `title` is given.",
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
