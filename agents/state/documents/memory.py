"""Documents kept in memory: for tests, and for a graph without a checkpoint store."""

from __future__ import annotations

import json
import time
from typing import Any

from agents.state.documents.common import (
    Changes,
    changed,
    check_limit,
    index_of,
    paged,
    position,
    prefix_range,
)


class MemoryDocuments:
    """Documents in memory (tests, a graph without a store)."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, str], tuple[str | None, str | None, float, str]] = {}

    async def put(self, kind: str, doc_id: str, body: dict[str, Any], **index: Any) -> None:
        """See ``Documents.put``."""
        self.rows[(kind, doc_id)] = _row(body, index)

    async def add(self, kind: str, doc_id: str, body: dict[str, Any], **index: Any) -> bool:
        """See ``Documents.add``."""
        if (kind, doc_id) in self.rows:
            return False
        await self.put(kind, doc_id, body, **index)
        return True

    async def get(self, kind: str, doc_id: str) -> dict[str, Any] | None:
        """See ``Documents.get``."""
        row = self.rows.get((kind, doc_id))
        return None if row is None else dict(json.loads(row[3]))

    async def merge(
        self, kind: str, doc_id: str, changes: Changes, **index: Any
    ) -> dict[str, Any] | None:
        """See ``Documents.merge``: the read and the write with no await between them."""
        row = self.rows.get((kind, doc_id))
        if row is None:
            return None
        body = changed(json.loads(row[3]), changes)
        self.rows[(kind, doc_id)] = _row(body, index_of(body, index))
        return body

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
        """See ``Documents.find``."""
        rows = [
            row
            for (k, doc_id), row in self.rows.items()
            if k == kind
            and owner in (None, row[0])
            and status in (None, row[1])
            and (before is None or row[2] < before)
            and (id_prefix is None or doc_id.startswith(prefix_range(id_prefix)[0]))
        ]
        rows.sort(key=lambda row: -row[2])
        return [json.loads(row[3]) for row in rows[:limit]]

    async def find_page(
        self,
        kind: str,
        *,
        owner: str | None = None,
        status: str | None = None,
        limit: int = 100,
        after: str | None = None,
    ) -> tuple[list[tuple[str, dict[str, Any]]], bool]:
        """See ``Documents.find_page``."""
        check_limit(limit)
        start = position(after)
        rows = sorted(
            (
                (row[2], doc_id, row[3])
                for (k, doc_id), row in self.rows.items()
                if k == kind
                and owner in (None, row[0])
                and status in (None, row[1])
                and (start is None or (row[2], doc_id) < start)
            ),
            reverse=True,
        )
        return paged(rows[: limit + 1], limit)

    async def count(self, kind: str, *, status: str | None = None) -> int:
        """See ``Documents.count``."""
        return sum(1 for (k, _), row in self.rows.items() if k == kind and status in (None, row[1]))

    async def delete(self, kind: str, doc_id: str) -> bool:
        """See ``Documents.delete``."""
        return self.rows.pop((kind, doc_id), None) is not None


def _row(body: dict[str, Any], index: dict[str, Any]) -> tuple[str | None, str | None, float, str]:
    """A document as kept: owner, status, updated (now by default), body."""
    updated = index.get("updated") or time.time()
    return index.get("owner"), index.get("status"), updated, json.dumps(body)
