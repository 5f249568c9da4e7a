"""How an error names what a caller sent: a long name cut, a value by its JSON type, a
few of many choices.

A caller may send a name of any length (a tool, a skill, a resource URI); an error that
quotes it whole hands a 5,000-character name back, and to a model, whole.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

ECHO_CHARS = 100  # of a caller-supplied name, quoted in an error
FEW = 5  # choices named in a refusal


def cut(text: str, limit: int = ECHO_CHARS) -> str:
    """``text`` as an error quotes it: its first ``limit`` characters, then an ellipsis."""
    return text if len(text) <= limit else text[:limit] + "…"


def cut_in(message: str, *sent: str) -> str:
    """``message`` (written elsewhere, quoting what a caller sent) with each of ``sent``
    cut as ``cut`` does, where it is quoted raw or as ``repr`` quotes it."""
    for text in sent:
        if len(text) > ECHO_CHARS:
            message = message.replace(repr(text)[1:-1], repr(cut(text))[1:-1])
            message = message.replace(text, cut(text))
    return message


def json_type(value: Any) -> str:
    """A JSON value's type as an error names it: ``an array``, ``a string``..."""
    if value is None:
        return "null"
    names = {
        bool: "a boolean",
        int: "a number",
        float: "a number",
        str: "a string",
        list: "an array",
    }
    return names.get(type(value), "an object")


def not_an_object(what: str, value: Any) -> str | None:
    """Why ``value`` (or the JSON text it holds) is no JSON object, naming what it is, or
    None when it is one, or is empty or no JSON at all (the arguments check says so)."""
    if value is None or value == "" or isinstance(value, dict):
        return None
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except (ValueError, RecursionError):
            return None
        if isinstance(parsed, dict):
            return None
        return f"{what} must be a JSON object, not JSON text of {json_type(parsed)}"
    return f"{what} must be a JSON object, not {json_type(value)}"


def few(items: Sequence[str], most: int = FEW) -> str:
    """The first ``most`` of ``items``, and how many more there are."""
    shown = ", ".join(items[:most])
    more = len(items) - most
    return f"{shown} and {more} more" if more > 0 else shown
