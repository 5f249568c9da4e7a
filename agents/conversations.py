"""Run conversation turns on the checkpointed graph, as a result or as a stream of events."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any, cast

import structlog
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    HumanMessage,
    ToolMessage,
    convert_to_messages,
)
from langchain_core.runnables import RunnableConfig
from langgraph.graph.state import CompiledStateGraph

from agents.checkpoint import thread_lock
from agents.errors import ModelError, SkilldeskError
from agents.events import Event, RunFailed, RunFinished, Token, from_custom
from agents.graph.context import RunBudget, RunContext
from agents.router.router import Router

log = structlog.get_logger(__name__)

# Nodes whose model output is the user's answer; other nodes' tokens (planner, parallel
# experts, the router's tie-break) are not streamed as answer text.
ANSWER_NODES = frozenset({"assistant", "expert", "aggregate", "joint_expert"})


@dataclass(frozen=True)
class RunLimits:
    """Per-run budget of model and tool calls, for the whole run."""

    max_model_calls: int = 12
    max_tool_calls: int = 24


@dataclass(frozen=True)
class ClientTurn:
    """A turn's messages as a client sent them (OpenAI format), whole history or just the new
    message. Which are new is decided when the run starts, against the history it reads
    anyway (see ``new_turn``): the thread is read once."""

    messages: list[dict[str, Any]]


class Conversations:
    """The one entry point the service uses to talk to the graph.

    Args:
        graph: The compiled conversation graph (with its checkpointer).
        limits: Budget applied to every run.
        router: The graph's router, to start a turn's retrieval early (optional).
    """

    def __init__(
        self,
        graph: CompiledStateGraph[Any, Any, Any, Any],
        limits: RunLimits | None = None,
        router: Router | None = None,
    ) -> None:
        self.graph = graph
        self.limits = limits or RunLimits()
        self.router = router
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
        self, thread_id: str, messages: Sequence[BaseMessage] | ClientTurn, **options: Any
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
        messages: Sequence[BaseMessage] | ClientTurn,
        *,
        profile: str | None = None,
        skill: str | None = None,
        workflow: str | None = None,
        callbacks: list[BaseCallbackHandler] | None = None,
    ) -> AsyncIterator[Event]:
        """Run one turn, yielding its events; always ends with RunFinished or RunFailed.

        Args:
            thread_id: The conversation.
            messages: The new messages of this turn, or what a client sent (a ClientTurn:
                which messages are new is decided against the history read for the run).
            profile: Model profile for this run (run config, not state).
            skill: Answer with this skill (explicit target).
            workflow: Run this workflow (explicit target).
            callbacks: LangChain callback handlers for this run (tracing, timing).

        Raises:
            InvalidTurn: before any event, when a ClientTurn has no usable new message.
        """
        # One run at a time per thread: two concurrent turns would both start from the same
        # checkpoint and the later write would drop the other's messages. The asyncio lock
        # covers one process; on PostgreSQL an advisory lock covers several.
        lock = self._locks.setdefault(thread_id, asyncio.Lock())
        self._waiting[thread_id] = self._waiting.get(thread_id, 0) + 1
        try:
            async with lock, thread_lock(self.graph.checkpointer, thread_id):  # type: ignore[arg-type]
                async for event in self._stream(
                    thread_id,
                    messages,
                    profile=profile,
                    skill=skill,
                    workflow=workflow,
                    callbacks=callbacks,
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
        turn: Sequence[BaseMessage] | ClientTurn,
        *,
        profile: str | None,
        skill: str | None,
        workflow: str | None,
        callbacks: list[BaseCallbackHandler] | None,
    ) -> AsyncIterator[Event]:
        run_id = str(uuid.uuid4())
        config = _config(thread_id, run_id=run_id)
        if callbacks:
            config["callbacks"] = callbacks
        ctx = RunContext(
            thread_id=thread_id,
            run_id=run_id,
            profile=profile,
            target_skill=skill,
            target_workflow=workflow,
            budget=RunBudget(self.limits.max_model_calls, self.limits.max_tool_calls),
        )
        structlog.contextvars.bind_contextvars(thread_id=thread_id, run_id=run_id)
        try:
            if self.router is not None:  # its query embedding overlaps the reads and writes
                self.router.anticipate(_last_user_text(turn), ctx)
            # One read of the thread before the run and none after: the run's last values are
            # the thread's state (each read deserialises the whole history).
            values = await self.state(thread_id)
            messages = (
                new_turn(turn.messages, has_history=bool(values.get("messages")))
                if isinstance(turn, ClientTurn)
                else list(turn)
            )
            log.info("run.started", new_messages=len(messages), profile=profile)
            before = dict(values.get("usage", {}))
            await self._repair(thread_id, values.get("messages", []))
            async for mode, payload in self.graph.astream(
                {"messages": _unless_retried(values.get("messages", []), messages)},
                config,
                context=ctx,
                stream_mode=["messages", "custom", "values"],
            ):
                if mode == "values":
                    values = cast(dict[str, Any], payload)
                    continue
                event = _event(mode, payload)
                if event is not None:
                    yield event
        except InvalidTurn:
            raise  # before any event: the caller answers it as a bad request
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
        history = values.get("messages", [])
        answer = next((m for m in reversed(history) if isinstance(m, AIMessage)), None)
        after = dict(values.get("usage", {}))
        used = {key: after.get(key, 0) - before.get(key, 0) for key in after}
        log.info("run.finished", route=(values.get("route") or {}).get("kind"), **used)
        yield RunFinished(thread_id, run_id, answer or AIMessage(content=""), used)

    async def _repair(self, thread_id: str, history: list[BaseMessage]) -> None:
        """Make the stored history valid for strict providers before a run: every tool call
        gets a result (a run cut off mid-way may lack some), and content no provider can read
        (stored before it was validated) is replaced by a note, so one bad message cannot
        break the thread for good."""
        answered = {m.tool_call_id for m in history if isinstance(m, ToolMessage)}
        missing: list[BaseMessage] = [
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
        # Only what clients wrote is checked: the service's own messages (model replies,
        # tool results) come from code that writes what providers read.
        unreadable = [
            m.model_copy(update={"content": _readable(m.content, _ROLE_OF_TYPE[m.type])})
            for m in history
            if m.id
            and m.type in ("human", "system")
            and content_problem(m.content, _ROLE_OF_TYPE[m.type]) is not None
        ]
        if missing or unreadable:
            log.warning("history.repaired", tool_calls=len(missing), contents=len(unreadable))
            await self.graph.aupdate_state(_config(thread_id), {"messages": unreadable + missing})


def _last_user_text(turn: Sequence[BaseMessage] | ClientTurn) -> str:
    """The text routing will see: the turn's last user message."""
    if isinstance(turn, ClientTurn):
        last = turn.messages[-1] if turn.messages else {}
        if last.get("role") != "user":
            return ""
        try:
            return HumanMessage(content=last.get("content")).text
        except (TypeError, ValueError):  # unreadable: new_turn will say why
            return ""
    texts = [m.text for m in turn if isinstance(m, HumanMessage)]
    return texts[-1] if texts else ""


def _unless_retried(history: list[BaseMessage], messages: Sequence[BaseMessage]) -> list[Any]:
    """The new messages, or none when the turn retries one that got no answer: a client
    whose request failed (clients retry 5xx on their own) resends the user's message, which
    the thread already holds, last."""
    n = len(messages)
    tail = history[-n:] if n else []
    if len(tail) == n and all(
        isinstance(old, HumanMessage)
        and isinstance(new, HumanMessage)
        and old.content == new.content
        for old, new in zip(tail, messages, strict=True)
    ):
        log.info("run.retried", messages=n)
        return []
    return list(messages)


MAX_MESSAGE_CHARS = 100_000  # of text in one message; the threads API holds to it too
_INSTRUCTIONS = ("system", "developer")
# The content part types OpenAI's format allows each role to send.
_PARTS_BY_ROLE = {
    "user": ("text", "image_url", "input_audio", "file"),
    "assistant": ("text", "refusal"),
    "system": ("text",),
    "developer": ("text",),
}
_ROLE_OF_TYPE = {"human": "user", "ai": "assistant", "system": "system"}


def content_problem(content: Any, role: str = "user") -> tuple[int | None, str] | None:
    """What is wrong with a message's content as OpenAI's format defines it for ``role``, if
    anything: the index of the offending part (None for the content itself) and why."""
    if content is None or isinstance(content, str):
        return None
    if not isinstance(content, list):
        return None, f"must be a string or a list of content parts, not {type(content).__name__}"
    allowed = _PARTS_BY_ROLE.get(role, ("text",))
    for j, part in enumerate(content):
        if isinstance(part, str):
            continue
        if not isinstance(part, dict):
            return j, "a content part must be an object with a 'type'"
        problem = _part_problem(part, allowed, role)
        if problem:
            return j, problem
    return None


def _part_problem(part: dict[str, Any], allowed: tuple[str, ...], role: str) -> str | None:
    kind = part.get("type")
    if kind not in allowed:
        known = ", ".join(repr(k) for k in allowed)
        return f"content part type {kind!r} is not allowed for role {role!r}; use {known}"
    value = part.get(kind)
    if kind in ("text", "refusal"):
        return None if isinstance(value, str) else f"a {kind!r} part needs a string {kind!r}"
    if not isinstance(value, dict):
        if kind == "image_url" and isinstance(value, str) and value:
            return None  # the short form LangChain accepts
        return f"a {kind!r} part needs an object {kind!r}"
    if kind == "image_url" and not (isinstance(value.get("url"), str) and value["url"]):
        return "an 'image_url' part needs 'image_url': {'url': ...}"
    if kind == "input_audio" and not all(isinstance(value.get(k), str) for k in ("data", "format")):
        return "an 'input_audio' part needs 'input_audio': {'data': ..., 'format': ...}"
    if kind == "file" and not any(isinstance(value.get(k), str) for k in ("file_id", "file_data")):
        return "a 'file' part needs 'file': {'file_id': ...} or {'file_data': ...}"
    return None


def _readable(content: Any, role: str) -> str | list[Any]:
    """The parts of stored content a provider can read; a note if none is left."""
    parts = content if isinstance(content, list) else []
    kept = [p for p in parts if content_problem([p], role) is None]
    return kept or "[this message's content could not be read and was removed]"


def _text_length(content: Any) -> int:
    if isinstance(content, str):
        return len(content)
    if not isinstance(content, list):
        return 0
    return sum(
        len(p) if isinstance(p, str) else len(str(p.get("text") or ""))
        for p in content
        if isinstance(p, str | dict)
    )


def _has_text(content: Any) -> bool:
    """Whether content says anything: non-blank text, or a part that is not text."""
    if isinstance(content, str):
        return bool(content.strip())
    if not isinstance(content, list):
        return False
    for part in content:
        if isinstance(part, dict) and part.get("type") == "text":
            part = part.get("text")
        if not isinstance(part, str) or part.strip():
            return True
    return False


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
    numbered = list(enumerate(messages))
    if has_history:
        last = max((i for i, m in numbered if m.get("role") == "assistant"), default=-1)
        numbered = [(i, m) for i, m in numbered[last + 1 :] if m.get("role") not in _INSTRUCTIONS]
    if not numbered:
        raise InvalidTurn(
            "no_new_message",
            "The request has no new message after the last assistant message; add the "
            "user's message.",
            "messages",
        )
    final_index, final = numbered[-1]
    if final.get("role") != "user":
        raise InvalidTurn(
            "no_new_message",
            f"The request's last message is the {final.get('role')}'s; end it with the user's "
            "message.",
            f"messages.{final_index}",
        )
    if not _has_text(final.get("content")):
        raise InvalidTurn(
            "no_new_message",
            f"messages[{final_index}] is empty; the user's message needs some content.",
            f"messages.{final_index}.content",
        )
    for i, m in numbered:
        if _text_length(m.get("content")) > MAX_MESSAGE_CHARS:
            raise InvalidTurn(
                "message_too_long",
                f"messages[{i}] has more than {MAX_MESSAGE_CHARS:,} characters of text; "
                "shorten it or send the document as a file.",
                f"messages.{i}.content",
            )
        problem = content_problem(m.get("content"), str(m.get("role")))
        if problem is not None:
            part, what = problem
            where = "" if part is None else f".{part}"
            raise InvalidTurn(
                "invalid_content",
                f"messages[{i}].content{where}: {what}",
                f"messages.{i}.content{where}",
            )
    messages = [m for _, m in numbered]
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
