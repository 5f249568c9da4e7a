"""OpenAI's chat completions and model list, in the shapes OpenAI's clients read."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool

from app.api.schemas.messages import ChatMessage
from app.api.schemas.runs import ONE_TARGET, SkillName, WorkflowName

MAX_MESSAGES = 5_000  # in one request (clients may resend a whole conversation)
FinishReason = Literal["stop", "length", "tool_calls", "content_filter", "function_call"]


class StreamOptions(BaseModel):
    """OpenAI's ``stream_options``."""

    include_usage: StrictBool | None = Field(
        False, description="End the stream with a chunk carrying the usage (`choices` empty)."
    )


class ChatCompletionRequest(BaseModel):
    """The part of OpenAI's request that Skilldesk reads; its other fields are accepted and
    ignored."""

    model_config = ConfigDict(extra="allow", json_schema_extra=ONE_TARGET)

    model: str = Field(
        "skilldesk", description="A model profile's name; any other name means the default."
    )
    messages: list[ChatMessage] = Field(
        min_length=1,
        max_length=MAX_MESSAGES,
        description="The conversation, oldest first, ending with the user's message: the "
        "whole of it, or on a thread (`X-Thread-Id`) just the new message. On a thread with "
        "history only the messages after the last assistant message are new; system "
        "messages count on the first turn only.",
    )
    stream: StrictBool | None = Field(
        False, description="Stream `chat.completion.chunk` events (null: no)."
    )
    stream_options: StreamOptions | None = None
    skill: SkillName | None = Field(
        None,
        description="Skilldesk: answer with this installed skill (400 `unknown_skill` otherwise).",
    )
    workflow: WorkflowName | None = Field(
        None,
        description="Skilldesk: run this installed workflow (400 `unknown_workflow` otherwise).",
    )


class CompletionUsage(BaseModel):
    """Tokens the answer took, over every model call of the turn."""

    prompt_tokens: int = Field(description="Tokens sent to the model.")
    completion_tokens: int = Field(description="Tokens the model wrote.")
    total_tokens: int = Field(description="Both.")
    completion_tokens_details: dict[str, int] | None = Field(
        None, description="OpenAI's breakdown; not sent."
    )
    prompt_tokens_details: dict[str, int] | None = Field(
        None, description="OpenAI's breakdown; not sent."
    )


class ChatCompletionBase(BaseModel):
    """What every completion object and chunk carries."""

    id: str = Field(description="The completion's id; every chunk of a stream shares it.")
    object: str
    created: int = Field(description="Unix time, in seconds.")
    model: str = Field(description="The request's `model`, as sent.")


class ChatCompletionMessage(BaseModel):
    """The assistant's answer."""

    role: Literal["assistant"]
    content: str | None = Field(description="The answer's text.")
    refusal: str | None = Field(None, description="OpenAI's refusal; not sent.")
    tool_calls: list[dict[str, Any]] | None = Field(
        None,
        description="OpenAI's tool calls for the client to run; never sent (the "
        "service runs its skills' tools itself).",
    )


class Choice(BaseModel):
    """The one answer (Skilldesk answers with one choice)."""

    index: int = Field(description="Always 0.")
    message: ChatCompletionMessage
    finish_reason: FinishReason = Field(description="`stop`.")
    logprobs: dict[str, Any] | None = Field(None, description="OpenAI's; not sent.")


class ChatCompletion(ChatCompletionBase):
    """OpenAI's ``chat.completion`` object."""

    object: Literal["chat.completion"]
    choices: list[Choice]
    usage: CompletionUsage
    service_tier: str | None = Field(None, description="OpenAI's; not sent.")
    system_fingerprint: str | None = Field(None, description="OpenAI's; not sent.")


class ChoiceDelta(BaseModel):
    """What a chunk adds to the answer."""

    role: Literal["assistant"] | None = Field(None, description="In the first chunk only.")
    content: str | None = Field(None, description="Text to append.")
    refusal: str | None = Field(None, description="OpenAI's; not sent.")
    tool_calls: list[dict[str, Any]] | None = Field(None, description="OpenAI's; never sent.")


class ChunkChoice(BaseModel):
    """One chunk's piece of the answer."""

    index: int = Field(description="Always 0.")
    delta: ChoiceDelta
    finish_reason: FinishReason | None = Field(description="`stop` in the last chunk, else null.")
    logprobs: dict[str, Any] | None = Field(None, description="OpenAI's; not sent.")


class ChatCompletionChunk(ChatCompletionBase):
    """OpenAI's ``chat.completion.chunk``: one Server-Sent Event of a streamed answer."""

    object: Literal["chat.completion.chunk"]
    choices: list[ChunkChoice] = Field(description="Empty in the usage chunk.")
    usage: CompletionUsage | None = Field(
        None, description="In the last chunk only, with `stream_options.include_usage`."
    )
    service_tier: str | None = Field(None, description="OpenAI's; not sent.")
    system_fingerprint: str | None = Field(None, description="OpenAI's; not sent.")


class ModelPublic(BaseModel):
    """A model profile, as OpenAI's model object."""

    id: str = Field(description="The profile's name; send it as `model`.")
    object: Literal["model"]
    owned_by: str = Field(description="Always `skilldesk`.")


class ModelsPublic(BaseModel):
    """The model profiles, as OpenAI's model list."""

    object: Literal["list"]
    data: list[ModelPublic]
