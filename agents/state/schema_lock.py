"""One process at a time sets the PostgreSQL schema up: processes started together on an
empty database (the first start of a deployment) raced each other's ``CREATE TABLE`` and
migration rows (UniqueViolation) and their ``CREATE INDEX CONCURRENTLY`` (DeadlockDetected)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import structlog

from agents.errors import ConfigError

log = structlog.get_logger(__name__)

# The advisory lock's key: one per schema (``hashtext`` of this and the schema's name), so
# services on other schemas of one database do not wait for each other.
_KEY = "skilldesk.schema_setup."
# Setting a schema up takes well under a second; waiting longer than this means a holder that
# is stuck (a process hung mid set-up, a session left open), which would otherwise hang every
# process starting, silently.
WARN_AFTER_S = 5.0
GIVE_UP_AFTER_S = 120.0


@asynccontextmanager
async def schema_lock(pool: Any) -> AsyncIterator[None]:
    """Hold the schema set-up lock of the pool's schema while the body runs.

    A session advisory lock, held on a connection of its own and taken by polling
    (``pg_try_advisory_lock``) rather than waiting: a process blocked in ``pg_advisory_lock``
    keeps a snapshot open, which the holder's ``CREATE INDEX CONCURRENTLY`` waits for, and
    PostgreSQL would break that deadlock by failing one of them.

    Raises:
        ConfigError: naming ``SKILLDESK_CHECKPOINT_URL`` and how to find the holder, when
            another process holds the lock ``GIVE_UP_AFTER_S`` (warned of after
            ``WARN_AFTER_S``).
    """
    async with pool.connection() as conn:
        wait = 0.02
        started = time.monotonic()
        warned = False
        while True:
            cursor = await conn.execute(
                "SELECT pg_try_advisory_lock(hashtext(%s || current_schema())) AS got,"
                " current_schema() AS schema",
                (_KEY,),
            )
            row = await cursor.fetchone()
            if row is not None and (row["got"] if isinstance(row, dict) else row[0]):
                break
            schema = (row["schema"] if isinstance(row, dict) else row[1]) if row else "?"
            if schema is None:  # no lock to wait for: hashtext(NULL) is no key
                path = await (await conn.execute("SHOW search_path")).fetchone() or ["?"]
                raise ConfigError(
                    "the PostgreSQL search_path of SKILLDESK_CHECKPOINT_URL "
                    f"({_first(path)}) names no schema that exists",
                    fix="create the schema (CREATE SCHEMA <name>) or correct the "
                    "search_path in SKILLDESK_CHECKPOINT_URL's options",
                )
            waited = time.monotonic() - started
            if waited >= GIVE_UP_AFTER_S:
                raise ConfigError(
                    f"gave up after {waited:.0f} s waiting for another process to finish "
                    f"setting up the PostgreSQL schema {schema!r} (SKILLDESK_CHECKPOINT_URL): "
                    "it holds the schema set-up lock",
                    fix="find the process holding it (SELECT pid FROM pg_locks WHERE "
                    "locktype='advisory'; then pg_stat_activity for what it is): a process "
                    "hung mid set-up or a session left open; stop it, or point "
                    "SKILLDESK_CHECKPOINT_URL at another schema",
                )
            if not warned and waited >= WARN_AFTER_S:
                log.warning(
                    "schema.setup_waiting",
                    schema=schema,
                    waited_s=round(waited, 1),
                    reason="another process is setting this schema up (holds its advisory lock)",
                    give_up_after_s=GIVE_UP_AFTER_S,
                )
                warned = True
            await asyncio.sleep(wait)
            wait = min(wait * 2, 0.25)
        try:
            yield
        finally:
            await conn.execute(
                "SELECT pg_advisory_unlock(hashtext(%s || current_schema()))", (_KEY,)
            )


def _first(row: Any) -> Any:
    """The one value of a row, a tuple's or a dict's."""
    return next(iter(row.values())) if isinstance(row, dict) else row[0]
