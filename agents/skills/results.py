"""A tool's result as the model reads it: the declared limits applied, made JSON once.

The trimming itself is ``agents.skills.trimming`` (standard library only, as worker
processes run it); here is what the service makes of it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agents.skills.spec import ResultLimits
from agents.skills.trimming import TOO_DEEP, NotData, Trimmed, as_json, has_files, trim

__all__ = [
    "MadeFile",
    "ToolResult",
    "as_json",
    "called",
    "effective_limits",
    "made",
    "result_of",
    "tool_error",
    "trim",
]


@dataclass(frozen=True)
class MadeFile:
    """A file a handler made, handed to a caller that has no thread to keep it in."""

    name: str
    media_type: str
    data: bytes
    caption: str = ""


@dataclass(frozen=True)
class ToolResult:
    """What a tool call produced: the text the model reads, and whether it worked;
    ``files``, what the handler made, for a direct caller (see ``ToolRunner.call``);
    ``raised``, the class name of what the handler raised, when the call failed so and
    ``content`` names that class (``ValueError``, ``SystemExit``)."""

    tool: str
    ok: bool
    content: str
    data: Any = None
    error_code: str | None = None
    truncated: bool = False
    ms: float = 0.0
    files: tuple[MadeFile, ...] = ()
    raised: str | None = None


def tool_error(
    tool: str, code: str, message: str, started: float, *, raised: str | None = None
) -> ToolResult:
    """A failed call's result: ``error (code): message``, timed from ``started``;
    ``raised``: the class of what the handler raised, when that is the failure."""
    ms = (time.perf_counter() - started) * 1000
    content = f"error ({code}): {message}"
    return ToolResult(tool, False, content, None, code, False, ms, raised=raised)


def effective_limits(skill: ResultLimits, tool: ResultLimits | None) -> ResultLimits:
    """A tool's limits override the skill's field by field (only the fields it sets)."""
    if tool is None:
        return skill
    return skill.model_copy(update={k: getattr(tool, k) for k in tool.model_fields_set})


def made(tool: str, trimmed: Trimmed, started: float) -> ToolResult:
    """The result of a call whose value was trimmed already (by its worker), timed from
    ``started``."""
    ms = (time.perf_counter() - started) * 1000
    return ToolResult(tool, True, trimmed.content, trimmed.data, None, trimmed.truncated, ms)


def result_of(tool: str, value: Any, limits: ResultLimits, started: float) -> ToolResult:
    """``value`` trimmed to ``limits``, or the tool error saying why it cannot be. Its work
    grows with the value: off the event loop for a value that may be large."""
    try:
        content, data, truncated = trim(value, limits)
    except NotData as exc:
        return tool_error(tool, "tool_failed", str(exc), started)
    except (TypeError, ValueError, RecursionError) as exc:
        reason = TOO_DEEP if isinstance(exc, RecursionError) else exc
        why = f"{tool} returned data that is not JSON: {reason}"
        return tool_error(tool, "tool_failed", why, started)
    return made(tool, Trimmed(content, data, truncated), started)


def called(call: Callable[[], Any], tool: str, limits: ResultLimits, started: float) -> Any:
    """``call()``'s value trimmed (its ``ToolResult``), on the thread that called it, right
    after (no second hop to another thread); as it is when it has files to adopt first."""
    value = call()
    return value if has_files(value) else result_of(tool, value, limits, started)
