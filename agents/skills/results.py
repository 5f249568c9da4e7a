"""A tool's result as the model reads it: the declared limits applied, made JSON once."""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from typing import Any

from agents.skills.spec import ResultLimits
from agents.skills.worker import as_json
from agents.text import mend


@dataclass(frozen=True)
class ToolResult:
    """What a tool call produced: the text the model reads, and whether it worked."""

    tool: str
    ok: bool
    content: str
    data: Any = None
    error_code: str | None = None
    truncated: bool = False
    ms: float = 0.0


def tool_error(tool: str, code: str, message: str, started: float) -> ToolResult:
    """A failed call's result: ``error (code): message``, timed from ``started``."""
    ms = (time.perf_counter() - started) * 1000
    return ToolResult(tool, False, f"error ({code}): {message}", None, code, False, ms)


def effective_limits(skill: ResultLimits, tool: ResultLimits | None) -> ResultLimits:
    """A tool's limits override the skill's field by field (only the fields it sets)."""
    if tool is None:
        return skill
    return skill.model_copy(update={k: getattr(tool, k) for k in tool.model_fields_set})


def trim(value: Any, limits: ResultLimits) -> tuple[str, Any, bool]:
    """Apply the declared limits: keep fields, cap items, cap characters."""
    truncated = False
    data = _lists(value)
    if limits.keep_fields is not None:
        data = _keep(data, set(limits.keep_fields))
    if limits.max_items is not None and isinstance(data, list) and len(data) > limits.max_items:
        data, truncated = data[: limits.max_items], True
    elif limits.max_items is not None and isinstance(data, dict):
        for key, item in list(data.items()):
            if isinstance(item, list) and len(item) > limits.max_items:
                data = {**data, key: item[: limits.max_items]}
                truncated = True
    if isinstance(data, str):
        text = data
    else:  # the data becomes JSON as the model reads it (sets as lists, bytes as text)
        try:
            text = json.dumps(data, ensure_ascii=False, default=as_json, allow_nan=False)
        except ValueError:  # NaN or infinity, which JSON has not: null, as JavaScript writes
            text = json.dumps(_finite(data), ensure_ascii=False, default=as_json, allow_nan=False)
        data = json.loads(text)
    text = mend(text)  # a handler's lone surrogates would break every later write
    if len(text) > limits.max_chars:
        cut = len(text) - limits.max_chars
        text = text[: limits.max_chars] + f"…[truncated {cut} characters]"
        truncated = True
    return text, data, truncated


def _finite(value: Any) -> Any:
    """``value`` with NaN and infinities as None (in dicts, lists, tuples and sets)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_finite(v) for v in value]
    return value


def _keep(value: Any, fields: set[str]) -> Any:
    if isinstance(value, dict):
        if fields & value.keys():
            return {k: v for k, v in value.items() if k in fields}
        return {k: _keep(v, fields) for k, v in value.items()}
    if isinstance(value, list):
        return [_keep(v, fields) for v in value]
    return value


def _lists(value: Any) -> Any:
    """A top-level tuple or set as a list, so the item limit applies to it."""
    return list(value) if isinstance(value, tuple | set | frozenset) else value
