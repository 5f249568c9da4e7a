"""The machine's PostgreSQL and Redis servers; a PostgreSQL schema of its own for a test (or a
benchmark)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg

POSTGRES = "postgresql://postgres@127.0.0.1:5432/test"
REDIS = "redis://127.0.0.1:6379/0"


@contextmanager
def schema_url(prefix: str = "t") -> Iterator[str]:
    """A connection URL whose tables land in a new, empty schema, dropped on exit."""
    schema = f"{prefix}_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(POSTGRES, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    try:
        yield f"{POSTGRES}?options=-csearch_path%3D{schema}"
    finally:
        with psycopg.connect(POSTGRES, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")
