"""OpenAI-compatible endpoints (OpenAI itself, and every server reached by base URL: vLLM,
Ollama, a local proxy…), called directly: aiohttp for async calls, the OpenAI SDK's client
for blocking ones."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

from agents.errors import MissingKey, ProviderStatusError
from agents.json_bytes import json_bytes
from agents.models.config import ModelProfile
from agents.models.slots import Slot, Slots
from agents.models.transports.common import OPENAI_PREFIX, PLACEHOLDER_KEY
from agents.models.transports.replies import AsyncEvents, Events, error_message, whole_reply


class OpenAITransport:
    """An OpenAI-compatible endpoint: async calls over aiohttp (one pooled session per event
    loop), blocking calls through the OpenAI SDK's client."""

    def __init__(self, profile: ModelProfile, key: str | None, environ: Mapping[str, str]) -> None:
        self.model = profile.litellm_model.removeprefix(OPENAI_PREFIX)
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
                raise ProviderStatusError(response.status, error_message(text), response.headers)
            if request.get("stream"):
                events = AsyncEvents(
                    _reads(response.content), _in_turn(response.release, slot.keep())
                )
                response = None  # released, then its slot, when the stream closes
                return events
            return whole_reply(await response.text(errors="replace"))
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
            return whole_reply(response.text)

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
