"""How one profile's requests reach its provider: the OpenAI SDK or litellm.

OpenAI-compatible endpoints (OpenAI itself and every server reached by base URL: vLLM,
Ollama, a local proxy…) are called through the OpenAI SDK directly. Every other provider
goes through litellm, which translates the request and the reply. Both return OpenAI-shaped
objects (``choices[0].message`` / ``choices[0].delta``, ``usage``), so the chat model reads
them alike.

Why two: on one streamed reply of a few chunks, litellm's own layers (its router, its
per-chunk re-wrapping, cost calculation and success logging) took 8-10 ms of CPU against
~2.5 ms for the SDK it wraps (``bench/model_client.py`` measures both). For the endpoints
most deployments use, that is several times the whole framework's cost per turn.
"""

from __future__ import annotations

import asyncio
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
        """One chat completion (``stream=True`` in the request: an async iterator of chunks)."""

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
        return await self._async_client().chat.completions.create(model=self.model, **request)

    def create(self, request: dict[str, Any]) -> Any:
        if self._sync is None:
            from openai import OpenAI

            self._sync = OpenAI(**self._options)
        return self._sync.chat.completions.create(model=self.model, **request)


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
        return await self._litellm().acompletion(**self._params, **request)

    def create(self, request: dict[str, Any]) -> Any:
        return self._litellm().completion(**self._params, **request)


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
