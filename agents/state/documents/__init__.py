"""Small JSON documents beside the checkpoints (workflow run records, approvals): one table,
kept in the checkpoint database (the SQLite file, or PostgreSQL), found by kind, id and the
few fields a listing filters on.

What a store does and what every store shares is in ``common.py`` (the ``Documents``
protocol); the table and its queries, for both SQL stores, in ``sql.py``; one store per
module: ``memory.py``, ``sqlite.py``, ``postgres.py``. ``documents_for`` picks the store
beside a checkpoint saver.
"""

from __future__ import annotations

from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver

from agents.state.documents.common import REMOVED, Documents
from agents.state.documents.memory import MemoryDocuments
from agents.state.documents.postgres import PostgresDocuments
from agents.state.documents.sqlite import SqliteDocuments
from agents.state.sqlite_saver import ThreadedSqliteSaver

__all__ = [
    "REMOVED",
    "Documents",
    "MemoryDocuments",
    "PostgresDocuments",
    "SqliteDocuments",
    "documents_for",
]


def documents_for(saver: BaseCheckpointSaver[Any] | None) -> Documents:
    """The documents store beside ``saver``'s checkpoints (in memory for other savers)."""
    if isinstance(saver, ThreadedSqliteSaver):
        return SqliteDocuments(saver)
    pool = getattr(saver, "conn", None)
    if type(saver).__name__.startswith("AsyncPostgres") and hasattr(pool, "connection"):
        return PostgresDocuments(pool)
    return MemoryDocuments()
