"""What a test scripts: the replies (or callables choosing them from a ``RequestView``),
and the record of each exchange that ``FakeLLM`` checks the script against."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Literal

from tests.fakellm.request import RequestView


@dataclass(frozen=True)
class ToolCall:
    """One tool call the fake model makes.

    Attributes:
        name: Function name.
        arguments: A dict (JSON-encoded on the wire) or a raw string sent verbatim.
        id: Tool-call id; ``call_<n>`` is generated when None.
    """

    name: str
    arguments: dict[str, Any] | str
    id: str | None = None

    @property
    def arguments_json(self) -> str:
        """The arguments as sent on the wire."""
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(self.arguments)


@dataclass(frozen=True)
class Reply:
    """One scripted answer (or fault) for a single chat-completions request.

    Attributes:
        content: Assistant text.
        tool_calls: Tool calls to emit.
        status: HTTP status; non-200 answers with an OpenAI-style error body.
        delay: Seconds to sleep before the response starts.
        usage: Explicit usage dict; computed from the request and reply if None.
        finish_reason: Defaults to "tool_calls" if tool calls are present, else "stop".
        stream_chunk_delay: Seconds to sleep between streamed chunks.
        error_message: Message of the error body for non-200 statuses.
        together: Hold the answer until this many chat requests have been open at once
            since this one arrived (this one included), or ``hold_timeout`` seconds have
            passed: a test sees calls overlap (or not) whatever the machine's speed.
        hold_timeout: The longest wait for ``together``.
        reasoning: A reasoning model's summary of its thinking: ``reasoning_content`` in a
            chat completion (as DeepSeek and vLLM send it), a reasoning item with its
            summary in a response of the Responses API; its tokens count as reasoning
            tokens in the estimated usage.
    """

    content: str | None = None
    tool_calls: tuple[ToolCall, ...] | list[ToolCall] = ()
    status: int = 200
    delay: float = 0.0
    usage: dict[str, Any] | None = None
    finish_reason: str | None = None
    stream_chunk_delay: float = 0.0
    error_message: str | None = None
    together: int = 0
    hold_timeout: float = 5.0
    reasoning: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "tool_calls", tuple(self.tool_calls))

    def __repr__(self) -> str:
        """Only the fields that differ from the defaults, tool calls as ``name(arguments)``."""
        parts = []
        for spec in fields(self):
            value = getattr(self, spec.name)
            if value == spec.default:
                continue
            if spec.name == "tool_calls":
                value = [f"{c.name}({c.arguments_json})" for c in value]
            parts.append(f"{spec.name}={value!r}")
        return f"Reply({', '.join(parts)})"


Answer = Callable[[RequestView], Reply]
"""A script callable: chooses the reply from the parsed request."""

ScriptItem = Reply | Answer

Source = Literal["script", "forced", "unscripted", "error"]


@dataclass(frozen=True)
class Exchange:
    """One chat request and how it was answered.

    Attributes:
        request: The parsed request.
        source: "script" (the next scripted item), "forced" (an ``on_forced_tool`` handler),
            "unscripted" (nothing was scripted for it) or "error" (a script callable raised
            or returned something other than a Reply).
        arrived: ``time.perf_counter()`` when the request arrived.
        answered: When its last byte was sent (None while it is being answered).
            note: What went wrong, for "unscripted" and "error".
        headers: The request's HTTP headers (lower-case names).
    """

    request: RequestView
    source: Source
    arrived: float
    answered: float | None = None
    note: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)

    def overlaps(self, other: Exchange) -> bool:
        """Whether each of the two arrived before the other was answered."""
        return (self.answered is None or other.arrived < self.answered) and (
            other.answered is None or self.arrived < other.answered
        )


class ScriptMismatch(AssertionError):
    """The script and the requests a test made did not match: replies were left over,
    requests found no reply, or a script callable failed."""


def describe(item: ScriptItem) -> str:
    """A short name for a script item: the Reply's fields, or the callable's name."""
    if isinstance(item, Reply):
        return repr(item)
    name = getattr(item, "__qualname__", None)
    return f"callable {name}" if name else repr(item)


def script_problems(
    leftovers: list[ScriptItem], exchanges: list[Exchange], *, allow_unscripted: bool = False
) -> list[str]:
    """What did not go by the script, one paragraph each: the ``leftovers``, the exchanges
    that found no scripted reply (unless allowed) and those whose script callable failed."""
    found = []
    if leftovers:
        lines = [f"  {n}. {describe(item)}" for n, item in enumerate(leftovers, 1)]
        found.append(
            f"{len(leftovers)} scripted repl{'y' if len(leftovers) == 1 else 'ies'} "
            "left over (the code made fewer model calls than scripted; call "
            "fake_llm.allow_leftovers() if that is the point):\n" + "\n".join(lines)
        )
    unscripted = [e for e in exchanges if e.source == "unscripted" and not allow_unscripted]
    if unscripted:
        lines = [f"  {n}. {e.request.describe()}" for n, e in enumerate(unscripted, 1)]
        found.append(
            f"{len(unscripted)} request{'' if len(unscripted) == 1 else 's'} found no "
            "scripted reply (answered HTTP 500, which a client may retry; script one "
            "more reply, or call fake_llm.allow_unscripted() if that is the point):\n"
            + "\n".join(lines)
        )
    found += [
        f"{e.note} (for the request with {e.request.describe()})"
        for e in exchanges
        if e.source == "error"
    ]
    return found
