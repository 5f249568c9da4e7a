"""Text that is not valid Unicode: found at the edge, where it is refused, and mended where
it comes from a model or a handler, so nothing after the edge fails on it.

Standard library only: a skill's worker process mends its handlers' results with it
(``agents/skills/trimming.py``).

JSON may spell a lone UTF-16 surrogate (``"\\ud800"``); Python decodes it into a string that
cannot be encoded as UTF-8, so it breaks whatever writes it later (a response, a checkpoint).
"""

from __future__ import annotations

import re
from typing import Any

_SURROGATE = re.compile("[\ud800-\udfff]")


def bad_text(value: Any, path: str = "") -> str | None:
    """Where in ``value`` (strings, lists, dicts, keys too) a string is not valid Unicode:
    its dotted path (``""`` for the value itself), or None when it all is."""
    if isinstance(value, str):
        return None if value.isascii() or not _SURROGATE.search(value) else path
    if isinstance(value, dict):
        for key, item in value.items():
            where = f"{path}.{key}" if path else str(key)
            if isinstance(key, str) and bad_text(key) is not None:
                return where
            found = bad_text(item, where)
            if found is not None:
                return found
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            found = bad_text(item, f"{path}.{i}" if path else str(i))
            if found is not None:
                return found
    return None


def mend(text: str) -> str:
    """``text`` with each lone surrogate replaced by U+FFFD (the replacement character)."""
    if text.isascii():
        return text
    return _SURROGATE.sub("\ufffd", text)


NOT_UNICODE = (
    "contains a lone UTF-16 surrogate (such as \\ud800), which is not valid Unicode; "
    "send the text as UTF-8"
)


def a_or_an(word: str) -> str:
    """``word`` with its indefinite article, as it is spoken: "an approval", "a tool"."""
    return f"{'an' if word[:1].lower() in 'aeiou' else 'a'} {word}"
