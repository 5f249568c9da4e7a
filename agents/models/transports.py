"""How one profile's requests reach its provider: directly, or through litellm.

OpenAI-compatible endpoints (OpenAI itself and every server reached by base URL: vLLM,
Ollama, a local proxy…) are called directly: aiohttp for async calls, with the server-sent
events read here as JSON, and the OpenAI SDK's client for blocking ones. Every other
provider goes through litellm, which translates the request and the reply. Both return
OpenAI-shaped replies as plain dicts (a ``chat.completion``, or ``chat.completion.chunk``
after chunk), so the chat model reads them alike.

Why two: a streamed reply of a few chunks cost 8-10 ms of CPU through litellm's own layers
(its router, per-chunk re-wrapping, cost calculation, success logging), ~2.5 ms through
the OpenAI SDK it wraps (whose typed request transform and per-chunk model construction
cost more than the HTTP exchange), ~1.2 ms with the SDK only sending bytes, and ~0.3 ms
over aiohttp (the HTTP client litellm itself uses) with the events read here as JSON.
``bench/model_client.py`` measures them side by side. On a 2-core service every
millisecond of a call is a millisecond of every turn's CPU.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from typing import Any, Protocol
from urllib.parse import urlsplit

from agents.errors import MissingKey, ProviderStatusError, StreamError, UnreadableReply
from agents.json_bytes import json_bytes
from agents.models.config import ModelProfile, resolve_api_key
from agents.models.slots import Slot, Slots

# Keys for OpenAI-compatible servers that need none (vLLM, Ollama, a local proxy): the
# OpenAI client refuses to start without one.
PLACEHOLDER_KEY = "sk-no-key-needed"
_OPENAI_PREFIX = "openai/"


class Transport(Protocol):
    """One profile's way to its provider; attempts are single (the gateway retries)."""

    def slot(self) -> contextlib.AbstractAsyncContextManager[Slot]:
        """Wait for one of the profile's ``max_connections`` slots and hold it for the block:
        the service's own queue, to be waited out before an attempt's timeout starts."""

    async def acreate(self, request: dict[str, Any], slot: Slot | None = None) -> Any:
        """One chat completion as a dict (``stream=True`` in the request: an async iterator
        of chunk dicts, with ``close()``), made in ``slot`` (a stream keeps it until it is
        closed); without one, the call waits for a slot first."""

    def create(self, request: dict[str, Any]) -> Any:
        """The same, blocking (it waits for a slot of its own, outside its timeouts)."""

    async def aclose(self) -> None:
        """Release connections held for the running event loop."""

    def warm_up(self) -> None:
        """Import what the calls need."""


def transport_for(profile: ModelProfile, environ: Mapping[str, str] | None = None) -> Transport:
    """The transport of a profile: a LangChain chat model for ``provider: langchain``,
    direct for ``openai/...`` models, else litellm."""
    key = resolve_api_key(profile, environ)
    if profile.provider == "langchain":
        from agents.models.langchain_transport import LangChainTransport

        return LangChainTransport(profile, key)
    if profile.litellm_model.startswith(_OPENAI_PREFIX):
        return OpenAITransport(profile, key, os.environ if environ is None else environ)
    return LiteLLMTransport(profile, key)


class OpenAITransport:
    """An OpenAI-compatible endpoint: async calls over aiohttp (one pooled session per event
    loop), blocking calls through the OpenAI SDK's client."""

    def __init__(self, profile: ModelProfile, key: str | None, environ: Mapping[str, str]) -> None:
        self.model = profile.litellm_model.removeprefix(_OPENAI_PREFIX)
        base = profile.api_base or environ.get("OPENAI_BASE_URL") or _OPENAI_BASE
        self.url = f"{base.rstrip('/')}/chat/completions"
        self._openai_itself = urlsplit(base).hostname == "api.openai.com"
        key = key or (PLACEHOLDER_KEY if profile.api_base else environ.get("OPENAI_API_KEY"))
        self._key = key
        self._timeout = profile.timeout_s
        self._max_connections = profile.max_connections
        self._slots = Slots(profile.max_connections)
        self._headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if key:
            self._headers["Authorization"] = f"Bearer {key}"
        if not profile.api_base and environ.get("OPENAI_ORG_ID"):
            self._headers["OpenAI-Organization"] = environ["OPENAI_ORG_ID"]
        self._options: dict[str, Any] = {
            "base_url": base,
            "api_key": key,
            "timeout": profile.timeout_s,
            "max_retries": 0,  # the gateway retries and falls back
        }
        self._session: tuple[asyncio.AbstractEventLoop, Any] | None = None
        self._proxy: tuple[Any, Any] = (None, None)
        self._sync: Any = None

    def body(self, request: dict[str, Any]) -> dict[str, Any]:
        """The JSON body of a request. OpenAI's own API takes the reply cap as
        ``max_completion_tokens`` (its reasoning models refuse ``max_tokens``); servers that
        merely speak the API (vLLM, Ollama…) keep the older name."""
        body = {"model": self.model, **request}
        if self._openai_itself and "max_tokens" in body:
            body["max_completion_tokens"] = body.pop("max_tokens")
        return body

    def _aiohttp(self) -> Any:
        # A connection pool belongs to the loop it was opened on (tests and CLI commands
        # may run several loops in one process).
        loop = asyncio.get_running_loop()
        if self._session is None or self._session[0] is not loop or self._session[1].closed:
            import aiohttp

            timeout = aiohttp.ClientTimeout(
                total=None, sock_connect=self._timeout, sock_read=self._timeout
            )
            # The proxy the environment names (HTTP(S)_PROXY, NO_PROXY), looked up once:
            # with trust_env, aiohttp reads it and ~/.netrc again for every request (a
            # thread hop and a file read per model call), and a netrc entry for the host
            # could only clash with the key's Authorization header.
            self._proxy = _env_proxy(self.url)
            # aiohttp's own pool opens 100 connections at most: with a model taking seconds a
            # call, the 101st call waited for one (bench/load: a p99 of 345 ms at 42 turns/s,
            # 83 ms with the profile's limit). The calls wait for a slot before they reach
            # the pool (untimed), so it has a connection for each.
            connector = aiohttp.TCPConnector(limit=self._max_connections)
            self._session = (loop, aiohttp.ClientSession(timeout=timeout, connector=connector))
        return self._session[1]

    def slot(self) -> contextlib.AbstractAsyncContextManager[Slot]:
        return self._slots.held()

    async def acreate(self, request: dict[str, Any], slot: Slot | None = None) -> Any:
        if not self._key:
            raise MissingKey()
        if slot is None:
            async with self.slot() as slot:
                return await self.acreate(request, slot)
        body = json_bytes(self.body(request))
        session = self._aiohttp()
        proxy, proxy_auth = self._proxy
        response = await session.post(
            self.url, data=body, headers=self._headers, proxy=proxy, proxy_auth=proxy_auth
        )
        try:
            if response.status >= 400:
                text = await response.text(errors="replace")
                raise ProviderStatusError(response.status, _error_message(text), response.headers)
            if request.get("stream"):
                events = AsyncEvents(
                    _reads(response.content), _in_turn(response.release, slot.keep())
                )
                response = None  # released, then its slot, when the stream closes
                return events
            return _whole(await response.text(errors="replace"))
        finally:
            if response is not None:
                response.release()

    def create(self, request: dict[str, Any]) -> Any:
        import httpx2

        if self._sync is None:
            from openai import DefaultHttpxClient, OpenAI

            limits = connection_limits(self._max_connections)
            self._sync = OpenAI(**self._options, http_client=DefaultHttpxClient(limits=limits))
        stream = bool(request.get("stream"))
        # The slot is taken before the SDK's pool is reached: its pool timeout (the
        # profile's timeout_s) would count the wait behind other calls as the server's.
        with self._slots.held_blocking() as slot:
            response = self._sync.post(
                "/chat/completions",
                body=self.body(request),
                cast_to=httpx2.Response,
                stream=stream,
                options=_AUTH,
            )
            if stream:
                return Events(response.iter_lines(), _in_turn(response.close, slot.keep()))
            return _whole(response.text)

    def warm_up(self) -> None:
        import aiohttp  # noqa: F401

    async def aclose(self) -> None:
        """Close the async connection pool (when it belongs to the running loop)."""
        if self._session is not None and self._session[0] is asyncio.get_running_loop():
            await self._session[1].close()
        self._session = None


_OPENAI_BASE = "https://api.openai.com/v1"


def _in_turn(first: Callable[[], object], then: Callable[[], None]) -> Callable[[], None]:
    """A stream's release: its connection's (``first``), then its slot (``then``), so the
    next call that takes the slot finds the connection back in the pool."""

    def release() -> None:
        try:
            first()
        finally:
            then()

    return release


def connection_limits(max_connections: int) -> Any:
    """The OpenAI SDK's connection limits with the profile's cap."""
    import httpx2

    return httpx2.Limits(
        max_connections=max_connections, max_keepalive_connections=min(max_connections, 100)
    )


def _env_proxy(url: str) -> tuple[Any, Any]:
    """The proxy (and its credentials) the environment names for ``url``, as aiohttp's
    ``trust_env`` finds it; (None, None) for none."""
    from aiohttp.helpers import get_env_proxy_for_url
    from yarl import URL

    try:
        return get_env_proxy_for_url(URL(url))
    except LookupError:
        return None, None


# What the SDK's typed methods ask of its auth layer: the API key as a bearer token.
_AUTH: Any = {"security": {"bearer_auth": True}}


async def _reads(content: Any) -> AsyncIterator[list[str]]:
    """The lines of an aiohttp body as it arrives, those of one network read together (no
    line-length limit)."""
    pending = b""
    async for data in content.iter_any():
        *lines, pending = (pending + data).split(b"\n")
        if lines:
            yield [line.rstrip(b"\r").decode("utf-8", errors="replace") for line in lines]
    if pending:
        yield [pending.rstrip(b"\r").decode("utf-8", errors="replace")]


class AsyncEvents:
    """The chunks of a streamed completion, read off its server-sent events as dicts.

    ``reads`` gives the lines of each network read. The text pieces that arrived in one read
    become one chunk: a server that sends faster than it is read (or a proxy that buffers)
    delivers dozens of pieces at once, and each piece would cost a trip through LangChain's
    callbacks, the graph's stream and the client's events (1.4 ms of CPU a turn measured
    under load). Pieces that arrive apart stay apart, so the stream stays as live as it came.
    """

    def __init__(self, reads: AsyncIterator[list[str]], release: Callable[[], Any]) -> None:
        self._chunks = _chunks_of(_aiter_events(reads))
        self._release = release

    def __aiter__(self) -> AsyncIterator[dict[str, Any]]:
        return self._chunks

    async def close(self) -> None:
        result = self._release()
        if asyncio.iscoroutine(result):
            await result


class Events:
    """Blocking :class:`AsyncEvents`."""

    def __init__(self, lines: Iterator[str], release: Callable[[], Any]) -> None:
        self._chunks = _chunks_in(_iter_events(lines))
        self._release = release

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return self._chunks

    def close(self) -> None:
        self._release()


async def _aiter_events(reads: AsyncIterator[list[str]]) -> AsyncIterator[list[tuple[str, str]]]:
    """The events that each read completed (reads that complete none give nothing)."""
    events = _EventReader()
    async for lines in reads:
        done = [event for line in lines if (event := events.feed(line)) is not None]
        if done:
            yield done
    if (event := events.feed("")) is not None:
        yield [event]


def _iter_events(lines: Iterator[str]) -> Iterator[tuple[str, str]]:
    events = _EventReader()
    for line in lines:
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


async def _chunks_of(
    batches: AsyncIterator[list[tuple[str, str]]],
) -> AsyncIterator[dict[str, Any]]:
    done = False
    async for batch in batches:
        joined: dict[str, Any] | None = None
        for event, data in batch:
            done = done or data.strip() == "[DONE]"
            if done:
                break
            try:
                chunk = _chunk(event, data)
            except Exception:
                if joined is not None:  # the text before the error reaches its reader first
                    yield joined
                raise
            if joined is not None and _text_piece(joined) and _text_piece(chunk):
                delta = joined["choices"][0]["delta"]
                delta["content"] += chunk["choices"][0]["delta"]["content"]
                continue
            if joined is not None:
                yield joined
            joined = chunk
        if joined is not None:
            yield joined


_TEXT_PIECE_CHOICE = {"index", "delta", "finish_reason", "logprobs"}


def _text_piece(chunk: dict[str, Any]) -> bool:
    """A chunk that only carries text: one choice, its delta content (and maybe the role),
    nothing that ends the choice or counts tokens; two of them in a row can be one."""
    choices = chunk["choices"]
    if len(choices) != 1 or chunk.get("usage"):
        return False
    choice = choices[0]
    delta = choice["delta"]
    return (
        choice.keys() <= _TEXT_PIECE_CHOICE
        and not choice.get("finish_reason")
        and not choice.get("logprobs")
        and isinstance(delta, dict)
        and isinstance(delta.get("content"), str)
        and delta.keys() <= {"content", "role"}
        and choice.get("index", 0) == 0
    )


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
    choices = chunk.get("choices") or []
    if not (isinstance(choices, list) and _all_with(choices, "delta")):
        raise UnreadableReply(
            f"the model server sent a chunk without choices[].delta: {data[:200]!r}"
        )
    return chunk


def _whole(text: str) -> dict[str, Any]:
    """A whole (not streamed) reply; an error body sent with status 200 raises."""
    reply = _json(text)
    if reply.get("error") and not reply.get("choices"):
        error = reply["error"]
        message = error.get("message") if isinstance(error, dict) else str(error)
        raise StreamError(f"the model server answered with an error: {message}")
    choices = reply.get("choices")
    if not (isinstance(choices, list) and choices and _all_with(choices, "message")):
        raise UnreadableReply(f"the model server's reply has no choices[].message: {text[:200]!r}")
    return reply


def _all_with(choices: list[Any], key: str) -> bool:
    """Whether every choice is an object whose ``key`` is an object."""
    return all(isinstance(c, dict) and isinstance(c.get(key) or {}, dict) for c in choices)


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


def _error_message(body: str) -> str:
    """The message of an OpenAI-style error body, else the body itself (shortened)."""
    try:
        data = json.loads(body)
    except ValueError:
        return body.strip()[:300] or "no details"
    error = data.get("error", data) if isinstance(data, dict) else data
    if isinstance(error, dict) and error.get("message"):
        return str(error["message"])
    return str(error)[:300]


class LiteLLMTransport:
    """Any other provider through litellm (imported on first use: it is slow to import).

    litellm keeps its own HTTP clients, shared across profiles, with no per-call cap: the
    profile's ``max_connections`` is kept here instead, as calls open at once (a streamed one
    holds its slot until the stream is closed), the others waiting for a slot.
    """

    def __init__(self, profile: ModelProfile, key: str | None) -> None:
        self._slots = Slots(profile.max_connections)
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

    def slot(self) -> contextlib.AbstractAsyncContextManager[Slot]:
        return self._slots.held()

    async def acreate(self, request: dict[str, Any], slot: Slot | None = None) -> Any:
        if slot is None:
            async with self.slot() as slot:
                return await self.acreate(request, slot)
        reply = await self._litellm().acompletion(**self._params, **request)
        if not request.get("stream"):
            return reply.model_dump()
        return _AsyncDicts(reply, slot.keep())  # its slot is given back when it is closed

    def create(self, request: dict[str, Any]) -> Any:
        with self._slots.held_blocking() as slot:
            reply = self._litellm().completion(**self._params, **request)
            if not request.get("stream"):
                return reply.model_dump()
            return _Dicts(reply, slot.keep())

    async def aclose(self) -> None:
        """litellm keeps its own clients."""

    def warm_up(self) -> None:
        self._litellm()


class _Dicts:
    """litellm's chunk objects as dicts (blocking); ``release`` once closed."""

    def __init__(self, stream: Any, release: Callable[[], Any]) -> None:
        self._stream = stream
        self._chunks = (chunk.model_dump() for chunk in stream)
        self._release: Callable[[], Any] | None = release

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return self._chunks

    def close(self) -> None:
        try:
            close_stream(self._stream)
        finally:
            release, self._release = self._release, None
            if release is not None:
                release()


class _AsyncDicts:
    """litellm's chunk objects as dicts; ``release`` once closed."""

    def __init__(self, stream: Any, release: Callable[[], Any]) -> None:
        self._stream = stream
        self._chunks = self._dicts()
        self._release: Callable[[], Any] | None = release

    async def _dicts(self) -> AsyncIterator[dict[str, Any]]:
        async for chunk in self._stream:
            yield chunk.model_dump()

    def __aiter__(self) -> AsyncIterator[dict[str, Any]]:
        return self._chunks

    async def close(self) -> None:
        try:
            await aclose_stream(self._stream)
        finally:
            release, self._release = self._release, None
            if release is not None:
                release()


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
