"""What every workflow check returns: findings ``(node id, dotted field path, message)``, and
the hint a message about an unknown name ends with (close names, then the names there are)."""

from __future__ import annotations

import difflib
from collections.abc import Collection

Finding = tuple[str, str, str]  # (node id or "", dotted path in the file, message)

_LISTED = 12  # names listed in a message at most


def suggest(name: str, known: Collection[str], what: str) -> str:
    """``; did you mean 'x'? (the nodes: a, b, ...)``: close names, then the names there are."""
    close = difflib.get_close_matches(name, list(known), n=2)
    hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    names = sorted(known)
    listed = ", ".join(names[:_LISTED]) if names else "none"
    more = f" and {len(names) - _LISTED} more" if len(names) > _LISTED else ""
    return f"{hint} ({what}: {listed}{more})"
