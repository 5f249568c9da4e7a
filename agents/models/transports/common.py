"""What every transport shares: the ``Transport`` protocol the gateway calls, the key
sent to servers that need none, and closing a provider's stream early."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any, Protocol

from agents.models.slots import Slot

# Keys for OpenAI-compatible servers that need none (vLLM, Ollama, a local proxy): the
# OpenAI client refuses to start without one.
PLACEHOLDER_KEY = "sk-no-key-needed"
OPENAI_PREFIX = "openai/"


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
