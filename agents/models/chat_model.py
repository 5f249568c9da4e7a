"""A LangChain chat model for one model profile of the gateway."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    InvalidToolCall,
    ToolCall,
    convert_to_openai_messages,
)
from langchain_core.messages.ai import UsageMetadata, add_usage
from langchain_core.messages.tool import tool_call_chunk
from langchain_core.output_parsers.openai_tools import make_invalid_tool_call, parse_tool_call
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.config import get_config
from pydantic import ConfigDict, Field

from agents.run import emit
from agents.text import mend

if TYPE_CHECKING:
    from langchain_core.callbacks import (
        AsyncCallbackManagerForLLMRun,
        CallbackManagerForLLMRun,
    )
    from langchain_core.language_models import LanguageModelInput

    from agents.models.gateway import ModelGateway


class GatewayChatModel(BaseChatModel):
    """Chat model for one named profile; the gateway makes the calls (retries, fallbacks)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    gateway: Any = Field(exclude=True, description="The ModelGateway that makes the calls.")
    profile_name: str = Field(description="Name of the model profile.")
    call_kwargs: dict[str, Any] = Field(default_factory=dict, description="Extra request fields.")

    @property
    def _llm_type(self) -> str:
        return "skilldesk-litellm"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"profile": self.profile_name}

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool],
        *,
        tool_choice: str | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        """Bind OpenAI-style tool definitions (any LangChain tool form is converted)."""
        formatted = [convert_to_openai_tool(tool) for tool in tools]
        if tool_choice is not None:
            if tool_choice not in ("auto", "none", "required"):
                tool_choice = {"type": "function", "function": {"name": tool_choice}}  # type: ignore[assignment]
            kwargs["tool_choice"] = tool_choice
        return super().bind(tools=formatted, **kwargs)

    def _request(
        self, messages: list[BaseMessage], stop: list[str] | None, **kwargs: Any
    ) -> dict[str, Any]:
        gateway: ModelGateway = self.gateway
        request: dict[str, Any] = gateway.request_params(self.profile_name)
        request.update(self.call_kwargs)
        request.update(kwargs)
        request["messages"] = to_openai_messages(messages)
        if stop:
            request["stop"] = stop
        return request

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        gateway: ModelGateway = self.gateway
        response = gateway.complete(self.profile_name, self._request(messages, stop, **kwargs))
        return self._to_result(response)

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        gateway: ModelGateway = self.gateway
        request = self._request(messages, stop, **kwargs)
        return self._to_result(await gateway.acomplete(self.profile_name, request))

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        gateway: ModelGateway = self.gateway
        request = self._streaming_request(messages, stop, **kwargs)
        for raw in gateway.stream(self.profile_name, request):
            chunk = self._to_chunk(raw)
            if chunk is not None:
                if run_manager and isinstance(chunk.message.content, str):
                    run_manager.on_llm_new_token(chunk.message.content, chunk=chunk)
                yield chunk

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        gateway: ModelGateway = self.gateway
        request = self._streaming_request(messages, stop, **kwargs)
        async for raw in gateway.astream(self.profile_name, request):
            chunk = self._to_chunk(raw)
            if chunk is not None:
                if run_manager and isinstance(chunk.message.content, str):
                    await run_manager.on_llm_new_token(chunk.message.content, chunk=chunk)
                yield chunk

    async def stream_reply(
        self,
        messages: list[BaseMessage],
        on_text: Callable[[str], None] | None = None,
        **kwargs: Any,
    ) -> AIMessage:
        """One streamed call's whole reply, as ``astream`` and a merge of its chunks give it
        (``finish_stream``), read straight from the gateway: no message object, callback
        or run tree per chunk. For callers that no LangChain callback handler listens to;
        ``on_text`` gets each piece of text as it comes. ``kwargs``: request fields (the
        ``tools`` that ``bind_tools`` binds)."""
        gateway: ModelGateway = self.gateway
        text: list[str] = []
        calls: dict[int, dict[str, Any]] = {}
        usage: UsageMetadata | None = None
        metadata: dict[str, Any] = {}
        async for raw in gateway.astream(
            self.profile_name, self._streaming_request(messages, kwargs.pop("stop", None), **kwargs)
        ):
            read = self._read(raw)
            if read is None:
                continue
            delta, got, meta = read
            if got is not None:
                usage = got if usage is None else add_usage(usage, got)
            metadata.update(meta)
            piece = delta.get("content")
            if piece:
                text.append(piece)
                if on_text is not None:
                    on_text(piece)
            for call in delta.get("tool_calls") or []:
                index = call.get("index")
                part = calls.setdefault(len(calls) if index is None else index, {})
                function = call.get("function") or {}
                for key, value in (("id", call.get("id")), ("name", function.get("name"))):
                    if value:
                        part[key] = part.get(key, "") + value
                if function.get("arguments"):
                    part["args"] = part.get("args", "") + function["arguments"]
        chunk = AIMessageChunk(
            content="".join(text),
            tool_call_chunks=[
                tool_call_chunk(name=p.get("name"), args=p.get("args"), id=p.get("id"), index=i)
                for i, p in sorted(calls.items())
            ],
            usage_metadata=usage,
            response_metadata=metadata,
        )
        return finish_stream(chunk)

    def _streaming_request(
        self, messages: list[BaseMessage], stop: list[str] | None, **kwargs: Any
    ) -> dict[str, Any]:
        request = self._request(messages, stop, **kwargs)
        request["stream_options"] = {"include_usage": True}
        return request

    def _to_result(self, response: dict[str, Any]) -> ChatResult:
        """The AIMessage of a whole reply (an OpenAI ``chat.completion`` as a dict)."""
        choice = (response.get("choices") or [{}])[0]
        message = choice.get("message") or {}
        tool_calls: list[ToolCall] = []
        invalid: list[InvalidToolCall] = []
        for raw in message.get("tool_calls") or []:
            try:
                parsed = parse_tool_call(raw, return_id=True)
            except Exception as exc:  # malformed JSON arguments from the model
                invalid.append(make_invalid_tool_call(raw, str(exc)))
            else:
                if parsed is not None:
                    tool_calls.append(parsed)  # type: ignore[arg-type]
        usage = _usage(response.get("usage"))
        metadata = {
            "profile": self.profile_name,
            "model_name": response.get("model"),
            "finish_reason": choice.get("finish_reason"),
            **_cost(response.get("usage")),
        }
        _show_reasoning(_reasoning(message))
        ai = AIMessage(
            content=message.get("content") or "",
            tool_calls=tool_calls,
            invalid_tool_calls=invalid,
            usage_metadata=usage,
            response_metadata=metadata,
            id=response.get("id"),
        )
        self._record(usage, metadata["model_name"], metadata.get("cost_micro_usd"))
        return ChatResult(generations=[ChatGeneration(message=ai)])

    def _to_chunk(self, raw: dict[str, Any]) -> ChatGenerationChunk | None:
        """One streamed piece (an OpenAI ``chat.completion.chunk`` as a dict)."""
        read = self._read(raw)
        if read is None:
            return None
        delta, usage, metadata = read
        chunks = [
            tool_call_chunk(
                name=(call.get("function") or {}).get("name"),
                args=(call.get("function") or {}).get("arguments"),
                id=call.get("id"),
                index=call.get("index"),
            )
            for call in delta.get("tool_calls") or []
        ]
        message = AIMessageChunk(
            content=delta.get("content") or "",
            tool_call_chunks=chunks,
            usage_metadata=usage,
            response_metadata=metadata,
        )
        return ChatGenerationChunk(message=message)

    def _read(
        self, raw: dict[str, Any]
    ) -> tuple[dict[str, Any], UsageMetadata | None, dict[str, Any]] | None:
        """A streamed piece's delta, usage and response metadata (its finish reason and
        cost), the usage recorded and a reasoning summary shown; None for a piece with
        neither a choice nor usage."""
        usage = _usage(raw.get("usage"))
        choices = raw.get("choices")
        if not choices and usage is None:
            return None
        metadata: dict[str, Any] = {}
        if usage is not None:
            cost = _cost(raw.get("usage"))
            self._record(usage, raw.get("model"), cost.get("cost_micro_usd"))
            metadata.update(cost)
        if not choices:
            return {}, usage, metadata
        choice = choices[0]
        delta = choice.get("delta") or {}
        _show_reasoning(_reasoning(delta))
        if choice.get("finish_reason"):
            metadata.update(finish_reason=choice["finish_reason"], profile=self.profile_name)
        return delta, usage, metadata

    def _record(
        self, usage: UsageMetadata | None, model_name: str | None, cost: int | None
    ) -> None:
        if usage is not None:
            gateway: ModelGateway = self.gateway
            gateway.usage.record(self.profile_name, model_name or "", usage, cost)


def to_openai_messages(messages: list[BaseMessage]) -> list[dict[str, Any]]:
    """OpenAI chat messages; malformed tool calls are sent back as they came, so that their
    error results still pair with a call (strict providers refuse orphan tool results)."""
    converted: list[dict[str, Any]] = []
    for message in messages:
        data: dict[str, Any] = convert_to_openai_messages(message)
        if isinstance(message, AIMessage) and message.invalid_tool_calls:
            data.setdefault("tool_calls", [])
            data["tool_calls"] = [
                *data["tool_calls"],
                *[
                    {
                        "id": bad.get("id"),
                        "type": "function",
                        "function": {
                            "name": bad.get("name") or "",
                            "arguments": bad.get("args") or "",
                        },
                    }
                    for bad in message.invalid_tool_calls
                ],
            ]
        converted.append(data)
    return converted


def _usage(raw: dict[str, Any] | None) -> UsageMetadata | None:
    if not raw:
        return None
    prompt = int(raw.get("prompt_tokens") or 0)
    completion = int(raw.get("completion_tokens") or 0)
    total = int(raw.get("total_tokens") or prompt + completion)
    usage = UsageMetadata(input_tokens=prompt, output_tokens=completion, total_tokens=total)
    details = raw.get("completion_tokens_details")
    reasoning = details.get("reasoning_tokens") if isinstance(details, dict) else None
    if reasoning:
        usage["output_token_details"] = {"reasoning": int(reasoning)}
    return usage


def _cost(raw: dict[str, Any] | None) -> dict[str, int]:
    """The call's cost as the gateway priced it (nothing when its prices are unknown)."""
    cost = raw.get("cost_micro_usd") if raw else None
    return {"cost_micro_usd": cost} if isinstance(cost, int) else {}


def _reasoning(message: dict[str, Any]) -> str:
    """A reasoning model's summary in a message or delta: ``reasoning_content`` as DeepSeek,
    litellm and the LangChain transport write it, ``reasoning`` as newer vLLM does."""
    value = message.get("reasoning_content") or message.get("reasoning")
    return value if isinstance(value, str) else ""


def _show_reasoning(text: str) -> None:
    """Send a reasoning summary to the run's trace as its own event: never part of the
    answer, never stored in the thread's messages."""
    if not text:
        return
    try:
        config = get_config()
    except RuntimeError:  # not inside a graph run
        return
    node = str((config.get("metadata") or {}).get("langgraph_node", ""))
    emit("reasoning_summary", text=text, node=node)


def finish_stream(chunk: AIMessageChunk) -> AIMessage:
    """The AIMessage of a whole streamed reply, with tool-call arguments parsed strictly.

    LangChain parses streamed arguments leniently (partial JSON is completed), which would turn
    a malformed call into a plausible one; here malformed arguments become invalid tool calls.
    """
    tool_calls: list[ToolCall] = []
    invalid: list[InvalidToolCall] = []
    for part in chunk.tool_call_chunks:
        raw = mend(part.get("args") or "{}")
        try:
            args = json.loads(raw)
            if not isinstance(args, dict):
                raise ValueError("arguments must be a JSON object")
        except ValueError as exc:
            invalid.append(
                InvalidToolCall(
                    name=part.get("name"),
                    args=raw,
                    id=part.get("id"),
                    error=f"malformed JSON arguments: {exc}",
                    type="invalid_tool_call",
                )
            )
        else:
            tool_calls.append(
                ToolCall(
                    name=part.get("name") or "", args=args, id=part.get("id"), type="tool_call"
                )
            )
    content = chunk.content
    return AIMessage(
        content=mend(content) if isinstance(content, str) else content,  # a model's bad text
        tool_calls=tool_calls,
        invalid_tool_calls=invalid,
        usage_metadata=chunk.usage_metadata,
        response_metadata=chunk.response_metadata,
        id=chunk.id,
        name=chunk.name,
    )
