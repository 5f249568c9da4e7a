"""One process at a time sets the PostgreSQL schema up: processes started together on an
empty database (the first start of a deployment) raced each other's ``CREATE TABLE`` and
migration rows (UniqueViolation) and their ``CREATE INDEX CONCURRENTLY`` (DeadlockDetected)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

# The advisory lock's key: one per schema (``hashtext`` of this and the schema's name), so
# services on other schemas of one database do not wait for each other.
_KEY = "skilldesk.schema_setup."


@asynccontextmanager
async def schema_lock(pool: Any) -> AsyncIterator[None]:
    """Hold the schema set-up lock of the pool's schema while the body runs.

    A session advisory lock, held on a connection of its own and taken by polling
    (``pg_try_advisory_lock``) rather than waiting: a process blocked in ``pg_advisory_lock``
    keeps a snapshot open, which the holder's ``CREATE INDEX CONCURRENTLY`` waits for, and
    PostgreSQL would break that deadlock by failing one of them.
    """
    async with pool.connection() as conn:
        wait = 0.02
        while True:
            cursor = await conn.execute(
                "SELECT pg_try_advisory_lock(hashtext(%s || current_schema())) AS got", (_KEY,)
            )
            row = await cursor.fetchone()
            if row is not None and (row["got"] if isinstance(row, dict) else row[0]):
                break
            await asyncio.sleep(wait)
            wait = min(wait * 2, 0.25)
        try:
            yield
        finally:
            await conn.execute(
                "SELECT pg_advisory_unlock(hashtext(%s || current_schema()))", (_KEY,)
            )
