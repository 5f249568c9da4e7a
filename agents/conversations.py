"""Run conversation turns on the checkpointed graph, as a result or as a stream of events."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any, cast

import structlog
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.runnables import RunnableConfig
from langgraph.graph.state import CompiledStateGraph

from agents.errors import ModelError, SkilldeskError
from agents.events import Event, RunFailed, RunFinished, Token

log = structlog.get_logger(__name__)


class Conversations:
    """The one entry point the service uses to talk to the graph.

    Args:
        graph: The compiled conversation graph (with its checkpointer).
    """

    def __init__(self, graph: CompiledStateGraph[Any, Any, Any, Any]) -> None:
        self.graph = graph

    async def history(self, thread_id: str) -> list[BaseMessage]:
        """Messages of a thread so far (empty for a new thread)."""
        snapshot = await self.graph.aget_state(_config(thread_id))
        return list(snapshot.values.get("messages", [])) if snapshot.values else []

    async def usage(self, thread_id: str) -> dict[str, int]:
        """Token usage of a thread so far."""
        snapshot = await self.graph.aget_state(_config(thread_id))
        return dict(snapshot.values.get("usage", {})) if snapshot.values else {}

    async def run(
        self, thread_id: str, messages: Sequence[BaseMessage], *, profile: str | None = None
    ) -> RunFinished | RunFailed:
        """Run one turn to the end and return how it ended."""
        last: RunFinished | RunFailed | None = None
        async for event in self.stream(thread_id, messages, profile=profile):
            if isinstance(event, RunFinished | RunFailed):
                last = event
        assert last is not None  # stream() always ends with one of the two
        return last

    async def stream(
        self, thread_id: str, messages: Sequence[BaseMessage], *, profile: str | None = None
    ) -> AsyncIterator[Event]:
        """Run one turn, yielding tokens as they come and a final RunFinished or RunFailed."""
        run_id = str(uuid.uuid4())
        config = _config(thread_id, run_id=run_id, profile=profile)
        structlog.contextvars.bind_contextvars(thread_id=thread_id, run_id=run_id)
        before = await self.usage(thread_id)
        log.info("run.started", new_messages=len(messages), profile=profile)
        try:
            async for mode, payload in self.graph.astream(
                {"messages": list(messages)}, config, stream_mode=["messages", "updates"]
            ):
                if mode != "messages":
                    continue
                chunk, meta = cast(tuple[Any, dict[str, Any]], payload)
                if (
                    isinstance(chunk, AIMessageChunk)
                    and isinstance(chunk.content, str)
                    and chunk.content
                ):
                    yield Token(text=chunk.content, node=str(meta.get("langgraph_node", "")))
        except ModelError as exc:
            log.warning("run.failed", code=exc.code, error=exc.message)
            yield RunFailed(thread_id, run_id, exc.code, exc.message, {"profile": exc.profile})
            return
        except SkilldeskError as exc:
            log.error("run.failed", code="config_error", error=str(exc))
            yield RunFailed(thread_id, run_id, "config_error", str(exc))
            return
        snapshot = await self.graph.aget_state(config)
        history = snapshot.values.get("messages", [])
        answer = next((m for m in reversed(history) if isinstance(m, AIMessage)), None)
        after = dict(snapshot.values.get("usage", {}))
        used = {key: after.get(key, 0) - before.get(key, 0) for key in after}
        log.info("run.finished", **used)
        yield RunFinished(thread_id, run_id, answer or AIMessage(content=""), used)


def _config(thread_id: str, *, run_id: str | None = None, profile: str | None = None) -> Any:
    config: RunnableConfig = {"configurable": {"thread_id": thread_id}}
    if profile:
        config["configurable"]["model_profile"] = profile
    if run_id:
        config["run_id"] = uuid.UUID(run_id)
        config["metadata"] = {"run_id": run_id}
    return config
