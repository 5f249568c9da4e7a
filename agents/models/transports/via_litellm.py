"""Every provider that is not OpenAI-compatible, through litellm (which translates the
request and the reply), its chunk objects handed on as dicts."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from agents.models.config import ModelProfile
from agents.models.slots import Slot, Slots
from agents.models.transports.common import PLACEHOLDER_KEY, aclose_stream, close_stream


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
