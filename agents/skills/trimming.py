"""A handler's value cut to its tool's declared limits, as the model reads it.

Standard library only (and ``agents.text``, which is too): a worker process runs it on its
handler's value before it replies (``agents/skills/worker.py``), so the service receives
the trimmed result, never does that work on its event loop, and a worker stays quick to
start. ``agents.skills.results`` re-exports it for the service's side.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any, Protocol

from agents.text import a_or_an, mend


class Limits(Protocol):
    """What ``trim`` reads of a tool's limits (``agents.skills.spec.ResultLimits``)."""

    @property
    def max_chars(self) -> int: ...
    @property
    def max_items(self) -> int | None: ...
    @property
    def keep_fields(self) -> tuple[str, ...] | None: ...


@dataclass(frozen=True)
class PlainLimits:
    """A tool's limits as plain data, as a worker receives them with each call."""

    max_chars: int
    max_items: int | None = None
    keep_fields: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Trimmed:
    """A value trimmed by ``trim``: its text for the model, its data, and whether either was
    cut."""

    content: str
    data: Any
    truncated: bool


class NotData(TypeError):
    """A handler's result holds what has no JSON form (an object, a generator)."""

    def __init__(self, kind: str) -> None:
        super().__init__(
            f"the handler returned {a_or_an(kind)}, not JSON data: return dicts, lists, strings, "
            "numbers, booleans or None"
        )


def as_json(value: Any) -> Any:
    """``json.dumps``'s ``default``: what JSON has not, as JSON: sets as lists, bytes and what
    has a text of its own (a path, a date) as text. What has none (an object, a generator) is
    refused (``NotData``): its text would be a memory address."""
    if isinstance(value, set | frozenset):
        return list(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    text = str(value)
    if _ADDRESS.search(text):
        raise NotData(type(value).__name__)
    return text


TOO_DEEP = "it nests too deep to be JSON: return flatter data (a list of records)"
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+>")  # object's own text: <Foo object at 0x7f...>


def has_files(value: Any) -> bool:
    """Whether ``value`` names files the service adopts as attachments before it trims the
    result (a result's ``files``: see ``files.adopt_files``); such a value is trimmed
    by the service, after that."""
    if not isinstance(value, dict) or "files" not in value:
        return False
    try:
        return bool(value["files"])
    except Exception:  # no truth of its own: the service's adoption tells what is wrong
        return True


def trim(value: Any, limits: Limits) -> tuple[str, Any, bool]:
    """Apply the declared limits: keep fields, cap items, cap characters (of the text only:
    the data keeps every character, as workflows read its fields).

    Raises:
        NotData: ``value`` holds what has no JSON form.
        TypeError, ValueError: ``value`` is not JSON data otherwise.
    """
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
    # A handler's lone surrogates would break every later write of the text and of the data
    # (a response, a checkpoint, a workflow run's record): mended in both.
    if isinstance(data, str):
        text = data = mend(data)
    else:  # the data becomes JSON as the model reads it (sets as lists, bytes as text)
        try:
            text = json.dumps(data, ensure_ascii=False, default=as_json, allow_nan=False)
        except ValueError:  # NaN or infinity, which JSON has not: null, as JavaScript writes
            text = json.dumps(_finite(data), ensure_ascii=False, default=as_json, allow_nan=False)
        text = mend(text)
        data = json.loads(text)
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
