"""Run conversation turns on the checkpointed graph, as a result or as a stream of events."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any, cast

import structlog
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    ToolMessage,
    convert_to_messages,
)
from langchain_core.runnables import RunnableConfig
from langgraph.graph.state import CompiledStateGraph

from agents.checkpoint import thread_lock
from agents.errors import ModelError, SkilldeskError
from agents.events import Event, RunFailed, RunFinished, Token, from_custom
from agents.graph.context import RunBudget, RunContext

log = structlog.get_logger(__name__)

# Nodes whose model output is the user's answer; other nodes' tokens (planner, parallel
# experts, the router's tie-break) are not streamed as answer text.
ANSWER_NODES = frozenset({"assistant", "expert", "aggregate", "joint_expert"})


@dataclass(frozen=True)
class RunLimits:
    """Per-run budget of model and tool calls, for the whole run."""

    max_model_calls: int = 12
    max_tool_calls: int = 24


class Conversations:
    """The one entry point the service uses to talk to the graph.

    Args:
        graph: The compiled conversation graph (with its checkpointer).
        limits: Budget applied to every run.
    """

    def __init__(
        self, graph: CompiledStateGraph[Any, Any, Any, Any], limits: RunLimits | None = None
    ) -> None:
        self.graph = graph
        self.limits = limits or RunLimits()
        self._locks: dict[str, asyncio.Lock] = {}
        self._waiting: dict[str, int] = {}

    async def state(self, thread_id: str) -> dict[str, Any]:
        """The thread's state values (empty for a new thread)."""
        snapshot = await self.graph.aget_state(_config(thread_id))
        return dict(snapshot.values or {})

    async def history(self, thread_id: str) -> list[BaseMessage]:
        """Messages of a thread so far (empty for a new thread)."""
        return list((await self.state(thread_id)).get("messages", []))

    async def usage(self, thread_id: str) -> dict[str, int]:
        """Token usage of a thread so far."""
        return dict((await self.state(thread_id)).get("usage", {}))

    async def run(
        self, thread_id: str, messages: Sequence[BaseMessage], **options: Any
    ) -> RunFinished | RunFailed:
        """Run one turn to the end and return how it ended."""
        last: RunFinished | RunFailed | None = None
        async for event in self.stream(thread_id, messages, **options):
            if isinstance(event, RunFinished | RunFailed):
                last = event
        assert last is not None  # stream() always ends with one of the two
        return last

    async def stream(
        self,
        thread_id: str,
        messages: Sequence[BaseMessage],
        *,
        profile: str | None = None,
        skill: str | None = None,
        workflow: str | None = None,
    ) -> AsyncIterator[Event]:
        """Run one turn, yielding its events; always ends with RunFinished or RunFailed.

        Args:
            thread_id: The conversation.
            messages: The new messages of this turn.
            profile: Model profile for this run (run config, not state).
            skill: Answer with this skill (explicit target).
            workflow: Run this workflow (explicit target).
        """
        # One run at a time per thread: two concurrent turns would both start from the same
        # checkpoint and the later write would drop the other's messages. The asyncio lock
        # covers one process; on PostgreSQL an advisory lock covers several.
        lock = self._locks.setdefault(thread_id, asyncio.Lock())
        self._waiting[thread_id] = self._waiting.get(thread_id, 0) + 1
        try:
            async with lock, thread_lock(self.graph.checkpointer, thread_id):  # type: ignore[arg-type]
                async for event in self._stream(
                    thread_id, messages, profile=profile, skill=skill, workflow=workflow
                ):
                    yield event
        finally:
            self._waiting[thread_id] -= 1
            if not self._waiting[thread_id]:
                del self._waiting[thread_id]
                self._locks.pop(thread_id, None)

    async def _stream(
        self,
        thread_id: str,
        messages: Sequence[BaseMessage],
        *,
        profile: str | None,
        skill: str | None,
        workflow: str | None,
    ) -> AsyncIterator[Event]:
        run_id = str(uuid.uuid4())
        config = _config(thread_id, run_id=run_id)
        ctx = RunContext(
            thread_id=thread_id,
            run_id=run_id,
            profile=profile,
            target_skill=skill,
            target_workflow=workflow,
            budget=RunBudget(self.limits.max_model_calls, self.limits.max_tool_calls),
        )
        structlog.contextvars.bind_contextvars(thread_id=thread_id, run_id=run_id)
        before = await self.usage(thread_id)
        await self._repair(thread_id)
        log.info("run.started", new_messages=len(messages), profile=profile)
        try:
            async for mode, payload in self.graph.astream(
                {"messages": list(messages)},
                config,
                context=ctx,
                stream_mode=["messages", "custom"],
            ):
                event = _event(mode, payload)
                if event is not None:
                    yield event
        except ModelError as exc:
            log.warning("run.failed", code=exc.code, error=exc.message)
            yield RunFailed(thread_id, run_id, exc.code, exc.message, {"profile": exc.profile})
            return
        except SkilldeskError as exc:
            log.error("run.failed", code="config_error", error=str(exc))
            yield RunFailed(thread_id, run_id, "config_error", str(exc))
            return
        except Exception as exc:  # a bug must fail the run, not the service or the thread
            log.exception("run.crashed")
            yield RunFailed(
                thread_id,
                run_id,
                "internal_error",
                f"The run stopped on an internal error ({type(exc).__name__}); "
                "the conversation so far is kept. It has been logged.",
            )
            return
        values = await self.state(thread_id)
        history = values.get("messages", [])
        answer = next((m for m in reversed(history) if isinstance(m, AIMessage)), None)
        after = dict(values.get("usage", {}))
        used = {key: after.get(key, 0) - before.get(key, 0) for key in after}
        log.info("run.finished", route=(values.get("route") or {}).get("kind"), **used)
        yield RunFinished(thread_id, run_id, answer or AIMessage(content=""), used)

    async def _repair(self, thread_id: str) -> None:
        """Give every tool call in history a result (a run cut off mid-way may lack some),
        so the history stays valid for strict providers."""
        history = await self.history(thread_id)
        answered = {m.tool_call_id for m in history if isinstance(m, ToolMessage)}
        missing = [
            ToolMessage(
                content="error (cancelled): the run stopped before this tool ran",
                tool_call_id=call["id"],
                name=call["name"],
                status="error",
            )
            for m in history
            if isinstance(m, AIMessage)
            for call in m.tool_calls
            if call.get("id") and call["id"] not in answered
        ]
        if missing:
            log.warning("history.repaired", tool_calls=len(missing))
            await self.graph.aupdate_state(_config(thread_id), {"messages": missing})


class InvalidTurn(ValueError):
    """Client messages that cannot become a turn; ``param`` names the offending message."""

    def __init__(self, code: str, message: str, param: str) -> None:
        super().__init__(message)
        self.code, self.message, self.param = code, message, param


def new_turn(messages: list[dict[str, Any]], *, has_history: bool) -> list[BaseMessage]:
    """The new messages of a turn, from OpenAI-format messages a client sent.

    On a thread with history only the messages after the client's last assistant message are
    new (system messages count on the first turn only), so a client may resend the whole
    conversation or send just the new message.

    Raises:
        InvalidTurn: for client-side tool calls or results (they would be orphans in the
            thread's history and break it for strict providers) or unreadable messages.
    """
    for i, m in enumerate(messages):
        if m.get("role") == "tool" or m.get("tool_calls"):
            raise InvalidTurn(
                "client_tools_unsupported",
                f"messages[{i}]: tool calls and tool "
                "results from the client are not supported; send user and "
                "assistant text (the service calls its skills' tools itself).",
                f"messages.{i}",
            )
    if has_history:
        last = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=-1)
        messages = [m for m in messages[last + 1 :] if m.get("role") not in ("system", "developer")]
    if not messages:
        raise InvalidTurn(
            "no_new_message",
            "The request has no new message after the last "
            "assistant message; add the user's message.",
            "messages",
        )
    try:
        return convert_to_messages(messages)
    except (ValueError, TypeError, KeyError) as exc:
        raise InvalidTurn(
            "invalid_message", f"A message could not be read: {exc}", "messages"
        ) from None


def _event(mode: str, payload: Any) -> Event | None:
    if mode == "custom" and isinstance(payload, dict):
        return from_custom(payload)
    if mode == "messages":
        chunk, meta = cast(tuple[Any, dict[str, Any]], payload)
        node = str(meta.get("langgraph_node", ""))
        if (
            node in ANSWER_NODES
            and isinstance(chunk, AIMessageChunk)
            and isinstance(chunk.content, str)
            and chunk.content
        ):
            return Token(text=chunk.content, node=node)
    return None


def _config(thread_id: str, *, run_id: str | None = None) -> Any:
    config: RunnableConfig = {"configurable": {"thread_id": thread_id}}
    if run_id:
        config["run_id"] = uuid.UUID(run_id)
        config["metadata"] = {"run_id": run_id}
    return config
