"""Profiles that name a LangChain chat model (``provider: langchain``).

The model's own provider package (``langchain-openai``: ``ChatOpenAI`` with the Responses API,
``AzureChatOpenAI`` deployments...) makes each attempt; the gateway keeps everything around
it, the same for every kind of profile: retries, fallbacks, timeouts, usage, strict tool-call
checking and the error codes. So requests and replies cross here in the gateway's one shape,
OpenAI chat completions as dicts, with a reasoning model's summary as ``reasoning_content``
(as DeepSeek, vLLM and litellm send it): the chat model above reads every transport alike.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import structlog
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    HumanMessage,
    InvalidToolCall,
    SystemMessage,
    ToolCall,
    ToolMessage,
)
from langchain_core.messages.ai import UsageMetadata
from langchain_core.runnables import RunnableConfig

from agents.errors import ProfileUnusable
from agents.models.config import ModelProfile
from agents.models.slots import Slot, Slots

# The inner model's calls report to no callback: the chat model above is the one a graph
# streams and traces (the inner one's tokens would otherwise reach the user twice).
log = structlog.get_logger(__name__)
_QUIET: RunnableConfig = {"callbacks": [], "run_name": "skilldesk-langchain-attempt"}
_NOT_KWARGS = frozenset({"messages", "tools", "tool_choice", "stop", "stream", "stream_options"})


class LangChainTransport:
    """One attempt through a LangChain chat model (built on first use).

    Its calls hold one of the profile's ``max_connections`` slots each (a streamed one until
    it is closed), whatever the model: the wait for one is not the model's time, where the
    OpenAI client's pool would count it against its timeout.
    """

    def __init__(self, profile: ModelProfile, key: str | None) -> None:
        self._profile = profile
        self._key = key
        self._slots = Slots(profile.max_connections)
        self._model: BaseChatModel | None = None
        self._lock = threading.Lock()
        self._async: tuple[asyncio.AbstractEventLoop, BaseChatModel, Any] | None = None

    def chat_model(self) -> BaseChatModel:
        """The profile's LangChain chat model (its construction errors surface in a call),
        its blocking connection pool capped at the profile's ``max_connections`` where the
        model takes one (OpenAI's; the async one is per loop, ``_async_model``)."""
        with self._lock:  # calls on several threads at once: one model, one pool
            if self._model is None:
                try:
                    self._model = self._capped_model()
                except (ValueError, TypeError, ImportError) as exc:
                    if "api_key" in str(exc).lower() or "api key" in str(exc).lower():
                        raise  # a missing key: told as such (``model_auth_failed``)
                    raise ProfileUnusable(
                        f"LangChain cannot build the model {self._profile.model!r} ({exc}); "
                        "fix the profile's model or kwargs in the models file"
                    ) from exc
            return self._model

    def _capped_model(self) -> BaseChatModel:
        model = build_chat_model(self._profile, self._key)
        if "http_client" not in type(model).model_fields or "http_client" in self._profile.kwargs:
            return model
        import openai

        from agents.models.transports.openai_compat import connection_limits

        client = openai.DefaultHttpxClient(
            timeout=self._profile.timeout_s,
            limits=connection_limits(self._profile.max_connections),
        )
        return build_chat_model(self._profile, self._key, http_client=client)

    def _async_model(self) -> BaseChatModel:
        # An async connection pool belongs to the loop it was opened on, and langchain-openai
        # shares one per base URL across models: each loop gets its own (tests and CLI
        # commands may run several loops in one process).
        loop = asyncio.get_running_loop()
        if self._async is None or self._async[0] is not loop:
            model, client = self.chat_model(), None
            fields = type(model).model_fields
            if "http_async_client" in fields and "http_async_client" not in self._profile.kwargs:
                import openai

                from agents.models.transports.openai_compat import connection_limits

                client = openai.DefaultAsyncHttpxClient(
                    timeout=self._profile.timeout_s,
                    limits=connection_limits(self._profile.max_connections),
                )
                model = build_chat_model(self._profile, self._key, http_async_client=client)
            self._async = (loop, model, client)
        return self._async[1]

    def _call(
        self, request: dict[str, Any], model: Any
    ) -> tuple[Any, list[BaseMessage], dict[str, Any]]:
        if request.get("tools"):
            model = model.bind_tools(request["tools"], tool_choice=_tool_choice(request))
        kwargs = {k: v for k, v in request.items() if k not in _NOT_KWARGS}
        if request.get("stop"):
            kwargs["stop"] = request["stop"]
        return model, from_openai_messages(request.get("messages") or []), kwargs

    def slot(self) -> contextlib.AbstractAsyncContextManager[Slot]:
        return self._slots.held()

    async def acreate(self, request: dict[str, Any], slot: Slot | None = None) -> Any:
        if slot is None:
            async with self.slot() as slot:
                return await self.acreate(request, slot)
        model, messages, kwargs = self._call(request, self._async_model())
        if request.get("stream"):
            return _AsyncChunks(model.astream(messages, _QUIET, **kwargs), slot.keep())
        return completion_of(await model.ainvoke(messages, _QUIET, **kwargs))

    def create(self, request: dict[str, Any]) -> Any:
        with self._slots.held_blocking() as slot:
            model, messages, kwargs = self._call(request, self.chat_model())
            if request.get("stream"):
                return _Chunks(model.stream(messages, _QUIET, **kwargs), slot.keep())
            return completion_of(model.invoke(messages, _QUIET, **kwargs))

    async def aclose(self) -> None:
        """Close the async connection pool opened on the running loop, if one was."""
        if self._async is not None and self._async[0] is asyncio.get_running_loop():
            client = self._async[2]
            if client is not None:
                await client.aclose()
        self._async = None

    def warm_up(self) -> None:
        # A missing key, say, is left to the first call: it reports it with its error code.
        try:
            self.chat_model()
        except ProfileUnusable as exc:  # said at start-up too, not only at the first call
            log.warning("model.profile_unusable", model=self._profile.model, error=str(exc))
        except Exception:
            pass


def build_chat_model(profile: ModelProfile, key: str | None, **extra: Any) -> BaseChatModel:
    """The LangChain chat model of a profile, as ``init_chat_model`` builds it.

    The profile's own settings come first (``api_base`` as ``base_url``, the key, the
    timeout, no retries of the package's own: the gateway retries); ``kwargs`` may
    override any of them.
    """
    from langchain.chat_models import init_chat_model

    from agents.models.transports import PLACEHOLDER_KEY

    options: dict[str, Any] = {"timeout": profile.timeout_s, "max_retries": 0}
    if profile.api_base:
        options["base_url"] = profile.api_base
    if key:
        options["api_key"] = key
    elif profile.api_base:
        options["api_key"] = PLACEHOLDER_KEY  # a local server; the client wants one
    options.update(profile.kwargs)
    if profile.reasoning_effort:  # OpenAI's Responses API takes it inside ``reasoning``
        reasoning = profile.kwargs.get("reasoning")
        if isinstance(reasoning, dict):
            options["reasoning"] = {"effort": profile.reasoning_effort, **reasoning}
        else:
            options.setdefault("reasoning_effort", profile.reasoning_effort)
    options.update(extra)
    model: BaseChatModel = init_chat_model(profile.model, **options)
    if "stream_usage" in type(model).model_fields and "stream_usage" not in profile.kwargs:
        model = model.model_copy(update={"stream_usage": True})  # usage of streamed calls
    return model


def _tool_choice(request: dict[str, Any]) -> str | None:
    choice = request.get("tool_choice")
    if isinstance(choice, dict):
        return str((choice.get("function") or {}).get("name") or choice.get("name") or "")
    return choice if isinstance(choice, str) else None


def from_openai_messages(messages: list[dict[str, Any]]) -> list[BaseMessage]:
    """LangChain messages of OpenAI chat messages; a malformed tool call of the history stays
    an invalid tool call (its error result still pairs with it)."""
    out: list[BaseMessage] = []
    for raw in messages:
        role, content = raw.get("role"), raw.get("content") or ""
        if role in ("system", "developer"):
            out.append(SystemMessage(content=content))
        elif role == "user":
            out.append(HumanMessage(content=content))
        elif role == "tool":
            out.append(ToolMessage(content=content, tool_call_id=str(raw.get("tool_call_id"))))
        elif role == "assistant":
            calls: list[ToolCall] = []
            invalid: list[InvalidToolCall] = []
            for call in raw.get("tool_calls") or []:
                function = call.get("function") or {}
                name, arguments, call_id = (
                    function.get("name"),
                    function.get("arguments"),
                    call.get("id"),
                )
                try:
                    args = json.loads(arguments or "{}")
                    if not isinstance(args, dict):
                        raise ValueError("not an object")
                except ValueError as exc:
                    invalid.append(
                        InvalidToolCall(
                            name=name,
                            args=arguments,
                            id=call_id,
                            error=str(exc),
                            type="invalid_tool_call",
                        )
                    )
                else:
                    calls.append(ToolCall(name=name or "", args=args, id=call_id, type="tool_call"))
            out.append(AIMessage(content=content, tool_calls=calls, invalid_tool_calls=invalid))
    return out


def split_content(message: BaseMessage) -> tuple[str, str]:
    """The answer text and the reasoning summary of a reply (plain text, or the content
    blocks of the Responses API and of LangChain's standard format)."""
    content = message.content
    if isinstance(content, str):
        reasoning = message.additional_kwargs.get("reasoning_content")
        return content, reasoning if isinstance(reasoning, str) else ""
    text: list[str] = []
    reasoning_parts: list[str] = []
    for block in content:
        if isinstance(block, str):
            text.append(block)
        elif isinstance(block, dict) and block.get("type") in ("text", "output_text"):
            text.append(str(block.get("text") or ""))
        elif isinstance(block, dict) and block.get("type") == "reasoning":
            if isinstance(block.get("reasoning"), str):  # LangChain's standard block
                reasoning_parts.append(block["reasoning"])
            for part in block.get("summary") or []:
                if isinstance(part, dict):
                    reasoning_parts.append(str(part.get("text") or ""))
    return "".join(text), "".join(reasoning_parts)


def openai_usage(usage: UsageMetadata | None) -> dict[str, Any] | None:
    """The OpenAI ``usage`` of LangChain's usage metadata (reasoning tokens kept)."""
    if not usage:
        return None
    out: dict[str, Any] = {
        "prompt_tokens": usage.get("input_tokens", 0),
        "completion_tokens": usage.get("output_tokens", 0),
        "total_tokens": usage.get("total_tokens", 0),
    }
    reasoning = (usage.get("output_token_details") or {}).get("reasoning")
    if reasoning:
        out["completion_tokens_details"] = {"reasoning_tokens": reasoning}
    return out


def completion_of(message: AIMessage) -> dict[str, Any]:
    """A whole reply as an OpenAI ``chat.completion`` dict."""
    text, reasoning = split_content(message)
    calls = [
        _call_dict(call.get("id"), call["name"], json.dumps(call["args"]))
        for call in message.tool_calls
    ]
    calls += [
        _call_dict(bad.get("id"), bad.get("name") or "", bad.get("args") or "")
        for bad in message.invalid_tool_calls
    ]
    body: dict[str, Any] = {"role": "assistant", "content": text}
    if calls:
        body["tool_calls"] = calls
    if reasoning:
        body["reasoning_content"] = reasoning
    metadata = message.response_metadata
    finish = metadata.get("finish_reason") or ("tool_calls" if calls else "stop")
    return {
        "id": message.id,
        "object": "chat.completion",
        "model": metadata.get("model_name") or metadata.get("model"),
        "choices": [{"index": 0, "message": body, "finish_reason": finish}],
        "usage": openai_usage(message.usage_metadata),
    }


def chunk_of(chunk: AIMessageChunk) -> dict[str, Any]:
    """One streamed piece as an OpenAI ``chat.completion.chunk`` dict."""
    text, reasoning = split_content(chunk)
    delta: dict[str, Any] = {"content": text}
    if reasoning:
        delta["reasoning_content"] = reasoning
    if chunk.tool_call_chunks:
        delta["tool_calls"] = [
            {
                "index": part.get("index"),
                "id": part.get("id"),
                "type": "function",
                "function": {"name": part.get("name"), "arguments": part.get("args") or ""},
            }
            for part in chunk.tool_call_chunks
        ]
    metadata = chunk.response_metadata
    choice = {"index": 0, "delta": delta, "finish_reason": metadata.get("finish_reason")}
    return {
        "object": "chat.completion.chunk",
        "model": metadata.get("model_name"),
        "choices": [choice],
        "usage": openai_usage(chunk.usage_metadata),
    }


def _call_dict(call_id: str | None, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


class _AsyncChunks:
    """A LangChain chat model's stream as chunk dicts, with ``close()`` (then ``release``)."""

    def __init__(self, source: AsyncIterator[AIMessageChunk], release: Callable[[], None]) -> None:
        self._source = source
        self._chunks = self._dicts()
        self._release = release

    async def _dicts(self) -> AsyncIterator[dict[str, Any]]:
        async for chunk in self._source:
            yield chunk_of(chunk)

    def __aiter__(self) -> AsyncIterator[dict[str, Any]]:
        return self._chunks

    async def close(self) -> None:
        try:
            await self._chunks.aclose()  # type: ignore[attr-defined]
            await self._source.aclose()  # type: ignore[attr-defined]
        finally:
            self._release()


class _Chunks:
    """Blocking :class:`_AsyncChunks`."""

    def __init__(self, source: Iterator[AIMessageChunk], release: Callable[[], None]) -> None:
        self._source = source
        self._chunks = (chunk_of(chunk) for chunk in source)
        self._release = release

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return self._chunks

    def close(self) -> None:
        try:
            self._chunks.close()
            close = getattr(self._source, "close", None)
            if close is not None:
                close()
        finally:
            self._release()
