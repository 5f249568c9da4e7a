"""What a documents store is (the ``Documents`` protocol) and what every store shares: a
document's index fields, id-prefix ranges and page cursors."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from typing import Any, Protocol

Changes = dict[str, Any] | Callable[[dict[str, Any]], dict[str, Any]]


class _Removed:
    """The type of ``REMOVED``."""

    def __repr__(self) -> str:
        return "REMOVED"


REMOVED: Any = _Removed()
"""A merge's value for a field it removes (None would be stored, and read back, as null)."""


def changed(body: dict[str, Any], changes: Changes) -> dict[str, Any]:
    """``body`` with ``changes`` (``Documents.merge``'s) written over its fields, those
    changed to ``REMOVED`` gone."""
    merged = {**body, **(changes(body) if callable(changes) else changes)}
    return {field: value for field, value in merged.items() if value is not REMOVED}


class Documents(Protocol):
    """Where documents are kept."""

    async def put(self, kind: str, doc_id: str, body: dict[str, Any], **index: Any) -> None:
        """Write a document (``index``: its ``owner`` and ``status``, for listings, and its
        ``updated`` time, now by default)."""
        ...

    async def add(self, kind: str, doc_id: str, body: dict[str, Any], **index: Any) -> bool:
        """Write a document unless one of that id is there (at once, whoever else adds it);
        whether it was written."""
        ...

    async def get(self, kind: str, doc_id: str) -> dict[str, Any] | None:
        """One document, or None."""
        ...

    async def merge(
        self, kind: str, doc_id: str, changes: Changes, **index: Any
    ) -> dict[str, Any] | None:
        """Write ``changes`` over a document's fields, its index (``owner``, ``status``,
        ``updated``) taken from the result, or from ``index`` for those it gives (as for
        ``put``); a field changed to ``REMOVED`` is removed. The document as written, or
        None (nothing written) when there is none.
        ``changes`` may be a function of the document as stored, called between the read
        and the write: no process changes it meanwhile (a conditional write: what it raises
        is raised, nothing written)."""
        ...

    async def find(
        self,
        kind: str,
        *,
        owner: str | None = None,
        status: str | None = None,
        limit: int | None = 100,
        before: float | None = None,
        id_prefix: str | None = None,
    ) -> list[dict[str, Any]]:
        """Documents of ``kind``, newest first, filtered by owner and status; ``before``: only
        those updated before that time (the next page of a listing); ``limit`` None: every
        one (for a set the service bounds itself, such as the runs under way); ``id_prefix``: only
        those whose id starts with it (ASCII letters and digits, else ValueError; read
        through an index)."""
        ...

    async def find_page(
        self,
        kind: str,
        *,
        owner: str | None = None,
        status: str | None = None,
        limit: int = 100,
        after: str | None = None,
    ) -> tuple[list[tuple[str, dict[str, Any]]], bool]:
        """A page of documents of ``kind``, newest first (then by id), after the cursor
        ``after``, each with its own cursor (where a page after it starts); and whether
        more follow. Pages neither skip nor repeat documents updated at the same time.
        ValueError for a malformed cursor."""
        ...

    async def count(self, kind: str, *, status: str | None = None) -> int:
        """How many documents of ``kind`` there are (with ``status``)."""
        ...

    async def delete(self, kind: str, doc_id: str) -> bool:
        """Remove a document; whether there was one."""
        ...


def index_of(body: dict[str, Any], given: dict[str, Any] | None = None) -> dict[str, Any]:
    """The index fields of a document that holds them (a thread's record), those ``given``
    (a merge's) in their place."""
    return {
        "owner": body.get("owner"),
        "status": body.get("status"),
        "updated": body.get("updated") or time.time(),
        **(given or {}),
    }


def prefix_range(id_prefix: str) -> tuple[str, str]:
    """The ids that start with ``id_prefix``, as [low, high) in byte order (no LIKE, so no
    escaping): the prefix, and the prefix with its last character the next one."""
    if not (id_prefix.isascii() and id_prefix.isalnum()):
        raise ValueError(f"id_prefix must be ASCII letters and digits, not {id_prefix!r}")
    return id_prefix, id_prefix[:-1] + chr(ord(id_prefix[-1]) + 1)


def position(after: str | None) -> tuple[float, str] | None:
    """A page cursor's ``(updated, id)``: the last document of the page before."""
    if after is None:
        return None
    updated, _, doc_id = after.partition(" ")
    try:
        found = float(updated)
    except ValueError:
        found = math.nan
    if math.isnan(found) or not doc_id:  # a huge exponent is inf: before every time
        raise ValueError(f"not a page cursor: {after!r}; pass a next page's cursor")
    return found, doc_id


def check_limit(limit: int) -> None:
    """ValueError for a page that could hold no document."""
    if limit < 1:
        raise ValueError(f"a page holds at least one document, not {limit}")


def paged(
    rows: list[tuple[float, str, str]], limit: int
) -> tuple[list[tuple[str, dict[str, Any]]], bool]:
    """The page's documents, each with its cursor, and whether more follow."""
    page = [(f"{updated!r} {doc_id}", json.loads(body)) for updated, doc_id, body in rows[:limit]]
    return page, len(rows) > limit
