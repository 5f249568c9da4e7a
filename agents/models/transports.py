"""How one profile's requests reach its provider: the OpenAI SDK or litellm.

OpenAI-compatible endpoints (OpenAI itself and every server reached by base URL: vLLM,
Ollama, a local proxy…) are called through the OpenAI SDK directly. Every other provider
goes through litellm, which translates the request and the reply. Both return OpenAI-shaped
replies as plain dicts (a ``chat.completion``, or ``chat.completion.chunk`` after chunk), so
the chat model reads them alike.

Why two: on one streamed reply of a few chunks, litellm's own layers (its router, its
per-chunk re-wrapping, cost calculation and success logging) took 8-10 ms of CPU against
~2.5 ms for the SDK it wraps, and ~1.4 ms when the SDK only sends the request and the
server-sent events are read here as JSON: the SDK's typed request transform and per-chunk
model construction cost more than the HTTP exchange itself (``bench/model_client.py``).
The SDK still provides the connection pool, authentication, timeouts and its status errors.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any, Protocol

from agents.models.config import ModelProfile, resolve_api_key

# Keys for OpenAI-compatible servers that need none (vLLM, Ollama, a local proxy): the
# OpenAI client refuses to start without one.
PLACEHOLDER_KEY = "sk-no-key-needed"
_OPENAI_PREFIX = "openai/"


class Transport(Protocol):
    """One profile's way to its provider; attempts are single (the gateway retries)."""

    async def acreate(self, request: dict[str, Any]) -> Any:
        """One chat completion as a dict (``stream=True`` in the request: an async iterator
        of chunk dicts, with ``close()``)."""

    def create(self, request: dict[str, Any]) -> Any:
        """The same, blocking."""


def transport_for(profile: ModelProfile, environ: Mapping[str, str] | None = None) -> Transport:
    """The transport of a profile: the OpenAI SDK for ``openai/...`` models, else litellm."""
    key = resolve_api_key(profile, environ)
    if profile.litellm_model.startswith(_OPENAI_PREFIX):
        return OpenAITransport(profile, key)
    return LiteLLMTransport(profile, key)


class OpenAITransport:
    """An OpenAI-compatible endpoint through the OpenAI SDK (one pooled client per loop)."""

    def __init__(self, profile: ModelProfile, key: str | None) -> None:
        self.model = profile.litellm_model.removeprefix(_OPENAI_PREFIX)
        self._options: dict[str, Any] = {
            "base_url": profile.api_base,  # None: the SDK's default (OPENAI_BASE_URL or OpenAI)
            "api_key": key or (PLACEHOLDER_KEY if profile.api_base else None),
            "timeout": profile.timeout_s,
            "max_retries": 0,  # the gateway retries and falls back
        }
        self._async: tuple[asyncio.AbstractEventLoop, Any] | None = None
        self._sync: Any = None

    def _async_client(self) -> Any:
        # An async HTTP pool belongs to the loop it was opened on (tests and CLI commands
        # may run several loops in one process).
        loop = asyncio.get_running_loop()
        if self._async is None or self._async[0] is not loop:
            from openai import AsyncOpenAI

            self._async = (loop, AsyncOpenAI(**self._options))
        return self._async[1]

    async def acreate(self, request: dict[str, Any]) -> Any:
        import httpx2

        stream = bool(request.get("stream"))
        response = await self._async_client().post(
            "/chat/completions",
            body={"model": self.model, **request},
            cast_to=httpx2.Response,
            stream=stream,
            options=_AUTH,
        )
        if stream:
            return AsyncEvents(response)
        return _json(response.text)

    def create(self, request: dict[str, Any]) -> Any:
        import httpx2

        if self._sync is None:
            from openai import OpenAI

            self._sync = OpenAI(**self._options)
        stream = bool(request.get("stream"))
        response = self._sync.post(
            "/chat/completions",
            body={"model": self.model, **request},
            cast_to=httpx2.Response,
            stream=stream,
            options=_AUTH,
        )
        if stream:
            return Events(response)
        return _json(response.text)


# What the SDK's typed methods ask of its auth layer: the API key as a bearer token.
_AUTH: Any = {"security": {"bearer_auth": True}}


class AsyncEvents:
    """The chunks of a streamed completion, read off its server-sent events as dicts."""

    def __init__(self, response: Any) -> None:
        self._response = response
        self._chunks = _chunks_of(_aiter_events(response))

    def __aiter__(self) -> AsyncIterator[dict[str, Any]]:
        return self._chunks

    async def close(self) -> None:
        await self._response.aclose()


class Events:
    """Blocking :class:`AsyncEvents`."""

    def __init__(self, response: Any) -> None:
        self._response = response
        self._chunks = _chunks_in(_iter_events(response))

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return self._chunks

    def close(self) -> None:
        self._response.close()


async def _aiter_events(response: Any) -> AsyncIterator[tuple[str, str]]:
    events = _EventReader()
    async for line in response.aiter_lines():
        if (event := events.feed(line)) is not None:
            yield event
    if (event := events.feed("")) is not None:
        yield event


def _iter_events(response: Any) -> Iterator[tuple[str, str]]:
    events = _EventReader()
    for line in response.iter_lines():
        if (event := events.feed(line)) is not None:
            yield event
    if (event := events.feed("")) is not None:
        yield event


class _EventReader:
    """Server-sent events, line by line: ``feed`` returns (event name, data) when a blank
    line ends an event that has data."""

    def __init__(self) -> None:
        self._event = ""
        self._data: list[str] = []

    def feed(self, line: str) -> tuple[str, str] | None:
        if not line:
            if not self._data:
                return None
            done = (self._event, "\n".join(self._data))
            self._event, self._data = "", []
            return done
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        return None


# Events after [DONE] are read but not used: a response read to its end lets its
# connection go back to the pool (closed half-read, the connection is dropped and the next
# call opens a new one).


async def _chunks_of(events: AsyncIterator[tuple[str, str]]) -> AsyncIterator[dict[str, Any]]:
    done = False
    async for event, data in events:
        done = done or data.strip() == "[DONE]"
        if not done:
            yield _chunk(event, data)


def _chunks_in(events: Iterator[tuple[str, str]]) -> Iterator[dict[str, Any]]:
    done = False
    for event, data in events:
        done = done or data.strip() == "[DONE]"
        if not done:
            yield _chunk(event, data)


def _chunk(event: str, data: str) -> dict[str, Any]:
    """One stream event's chunk; an error event raises (as the SDK's own stream does)."""
    chunk = _json(data)
    if event == "error" or chunk.get("error"):
        error = chunk.get("error") or chunk
        message = error.get("message") if isinstance(error, dict) else str(error)
        raise StreamError(f"the model server reported an error mid-stream: {message}")
    return chunk


def _json(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError:
        raise UnreadableReply(
            f"the model server sent something that is not JSON: {text[:200]!r}"
        ) from None
    if not isinstance(value, dict):
        raise UnreadableReply(f"the model server sent JSON that is not an object: {text[:200]!r}")
    return value


class UnreadableReply(ValueError):
    """The provider answered with something that is not an OpenAI-shaped JSON reply."""


class StreamError(RuntimeError):
    """The provider reported an error inside a stream that had started."""


class LiteLLMTransport:
    """Any other provider through litellm (imported on first use: it is slow to import)."""

    def __init__(self, profile: ModelProfile, key: str | None) -> None:
        self._params: dict[str, Any] = {
            "model": profile.litellm_model,
            "api_base": profile.api_base,
            "api_key": key or (PLACEHOLDER_KEY if profile.api_base else None),
            "timeout": profile.timeout_s,
            "stream_timeout": profile.timeout_s,
            "num_retries": 0,
            "max_retries": 0,
        }

    @staticmethod
    def _litellm() -> Any:
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # never fetch at run time
        import litellm

        litellm.suppress_debug_info = True
        litellm.drop_params = True  # a provider that lacks a parameter ignores it
        return litellm

    async def acreate(self, request: dict[str, Any]) -> Any:
        reply = await self._litellm().acompletion(**self._params, **request)
        if request.get("stream"):
            return _AsyncDicts(reply)
        return reply.model_dump()

    def create(self, request: dict[str, Any]) -> Any:
        reply = self._litellm().completion(**self._params, **request)
        if request.get("stream"):
            return (chunk.model_dump() for chunk in reply)
        return reply.model_dump()


class _AsyncDicts:
    """litellm's chunk objects as dicts."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self._chunks = self._dicts()

    async def _dicts(self) -> AsyncIterator[dict[str, Any]]:
        async for chunk in self._stream:
            yield chunk.model_dump()

    def __aiter__(self) -> AsyncIterator[dict[str, Any]]:
        return self._chunks

    async def close(self) -> None:
        await aclose_stream(self._stream)


async def aclose_stream(stream: AsyncIterator[Any]) -> None:
    """Close a provider stream early (its HTTP response is released)."""
    for name in ("close", "aclose"):
        close = getattr(stream, name, None)
        if close is not None:
            result = close()
            if asyncio.iscoroutine(result):
                await result
            return


def close_stream(stream: Iterator[Any]) -> None:
    """Close a blocking provider stream early."""
    close = getattr(stream, "close", None)
    if close is not None:
        close()
