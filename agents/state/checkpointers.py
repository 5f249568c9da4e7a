"""Checkpointers: an SQLite file by default (``sqlite_saver``), PostgreSQL for several service
processes; both with the codec of ``codec``, a run's read of a thread not repeated."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import structlog
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
)

from agents import metrics
from agents.errors import ConfigError
from agents.state.codec import KeptCodec
from agents.state.leases import LEASES
from agents.state.readonce import ReadOnce
from agents.state.schema_lock import schema_lock
from agents.state.sqlite_saver import ReadOnceSqliteSaver
from agents.state.thread_line import WAITERS

T = TypeVar("T")
log = structlog.get_logger(__name__)

POOL_SIZE = 10  # connections to PostgreSQL a process keeps at most


def sqlite_url(path: Path) -> str:
    """The checkpoint URL of an SQLite file."""
    return f"sqlite:///{path}"


def sqlite_path(url: str) -> str | None:
    """The file (or ``:memory:``) an ``sqlite://`` checkpoint URL names; None for another
    scheme."""
    if not url.startswith("sqlite://"):
        return None
    path = url.removeprefix("sqlite:///") if url.startswith("sqlite:///") else url[9:]
    return path or ":memory:"


@asynccontextmanager
async def open_checkpointer(
    url: str, *, checked: bool = False
) -> AsyncIterator[BaseCheckpointSaver[Any]]:
    """Open (and set up) the checkpointer a URL names; close it on exit.

    ``sqlite:///relative/file.sqlite``, ``sqlite:////absolute/file.sqlite`` (the SQLAlchemy
    convention), ``sqlite:///:memory:`` and ``postgresql://user@host:port/db`` are understood.
    ``checked``: the caller reached the store already (``check_checkpoint_store``), so
    PostgreSQL is not probed again before its pool opens.

    Raises:
        ConfigError: for any other scheme, or when the store cannot be opened.
    """
    path = sqlite_path(url)
    if path is not None:
        async with _sqlite(path) as saver:
            yield saver
    elif url.startswith(("postgresql://", "postgres://")):
        async with _postgres(url, checked=checked) as saver:
            yield saver
    else:
        raise ConfigError(
            f"checkpoint URL {url!r} (SKILLDESK_CHECKPOINT_URL) has an unknown scheme",
            fix="use sqlite:///path/to/file.sqlite or postgresql://user@host:5432/db",
        )


async def check_checkpoint_store(url: str) -> None:
    """Connect once to a PostgreSQL checkpoint store (nothing to do for SQLite's file).

    Raises:
        ConfigError: naming ``SKILLDESK_CHECKPOINT_URL``, when it cannot be reached.
    """
    if not url.startswith(("postgresql://", "postgres://")):
        return
    import psycopg

    try:
        probe = await psycopg.AsyncConnection.connect(url, connect_timeout=5)
        try:
            row = await (await probe.execute("SELECT current_schema()")).fetchone()
        finally:
            await probe.close()
    except Exception as exc:
        raise ConfigError(
            f"cannot connect to PostgreSQL at {_redact(url)} (SKILLDESK_CHECKPOINT_URL): "
            f"{str(exc).strip()}",
            fix="check that the server is running and that SKILLDESK_CHECKPOINT_URL names "
            "its host, port, user and database (postgresql://user@host:5432/db)",
        ) from None
    if row is None or row[0] is None:  # a search_path naming no schema that exists
        raise ConfigError(
            f"the search_path of SKILLDESK_CHECKPOINT_URL ({_redact(url)}) names no schema "
            "that exists in that database",
            fix="create the schema (CREATE SCHEMA <name>) or correct the search_path in the "
            "URL's options",
        )


@asynccontextmanager
async def _sqlite(path: str) -> AsyncIterator[BaseCheckpointSaver[Any]]:
    target = path
    if target != ":memory:":
        Path(target).parent.mkdir(parents=True, exist_ok=True)
    try:
        conn = sqlite3.connect(target, check_same_thread=False)
    except Exception as exc:
        raise ConfigError(f"cannot open the SQLite checkpoint file {target}: {exc}") from exc
    saver = ReadOnceSqliteSaver(conn)
    try:
        # WAL lets readers (history, a second CLI) work while a run writes.
        await saver.run(conn.execute, "PRAGMA journal_mode=WAL")
        # In WAL mode NORMAL still survives a process crash (a power cut may lose the last
        # commits); FULL would fsync on every checkpoint write of every step.
        await saver.run(conn.execute, "PRAGMA synchronous=NORMAL")
        # Then only copying the WAL into the file (a WAL checkpoint) syncs to disk: threads
        # of the saver do that (``ThreadedSqliteSaver.wal_every_s``), never a commit made on
        # the event loop.
        await saver.run(conn.execute, "PRAGMA wal_autocheckpoint=0")
        await saver.run(saver.setup)
        yield saver
    finally:
        await saver.run_long(conn.close)
        saver.close()


@asynccontextmanager
async def _postgres(url: str, *, checked: bool) -> AsyncIterator[BaseCheckpointSaver[Any]]:
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
    from psycopg.rows import dict_row
    from psycopg_pool import AsyncConnectionPool

    if not checked:  # a refused or misspelt URL fails now, not after a pool wait
        await check_checkpoint_store(url)
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
        url,
        min_size=1,
        max_size=POOL_SIZE,
        open=False,
        kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row},
    )
    await pool.open(wait=True, timeout=10)

    class AsyncPostgresTimedSaver(ReadOnce, KeptCodec, AsyncPostgresSaver):
        """The PostgreSQL saver, its checkpoint writes timed for the metrics, a run's read
        of a thread not repeated (``ReadOnce``), its history neither encoded nor decoded
        whole at each step (``KeptCodec``)."""

        def _dump_blobs(
            self,
            thread_id: str,
            checkpoint_ns: str,
            values: dict[str, Any],
            versions: ChannelVersions,
        ) -> list[tuple[str, str, str, str, str, bytes | None]]:
            return [
                (thread_id, checkpoint_ns, k, str(version), *self._dumps(values[k]))
                if k in values
                else (thread_id, checkpoint_ns, k, str(version), "empty", None)
                for k, version in versions.items()
            ]

        def _load_blobs(self, blob_values: list[tuple[bytes, bytes, bytes]]) -> dict[str, Any]:
            return {
                k.decode(): self._loads(t.decode(), v)
                for k, t, v in blob_values or []
                if t.decode() != "empty"
            }

        async def aput(
            self,
            config: RunnableConfig,
            checkpoint: Checkpoint,
            metadata: CheckpointMetadata,
            new_versions: ChannelVersions,
        ) -> RunnableConfig:
            with metrics.timed(metrics.CHECKPOINT_WRITE_SECONDS, "postgres"):
                return await super().aput(config, checkpoint, metadata, new_versions)

    try:
        saver = AsyncPostgresTimedSaver(pool)
        # The saver takes one asyncio.Lock around every read and write, pool or not
        # (langgraph issue 7259): a process did one checkpoint operation at a time whatever
        # the pool's size, and under load runs queued behind each other's round trips (a
        # workflow turn waited 0.8 s at 40 turns a second). Each operation takes a
        # connection of its own from the pool, so as many may run as it holds.
        saver.lock = asyncio.Semaphore(POOL_SIZE)  # type: ignore[assignment]
        async with schema_lock(pool):  # processes started together: one sets up at a time
            await saver.setup()
            async with pool.connection() as conn:  # the leases that hold a thread for one run
                await conn.execute(
                    f"CREATE TABLE IF NOT EXISTS {LEASES} (thread_id TEXT PRIMARY KEY, "
                    "holder TEXT NOT NULL, expires DOUBLE PRECISION NOT NULL)"
                )
                await conn.execute(  # and those waiting for one, in the order they came
                    f"CREATE TABLE IF NOT EXISTS {WAITERS} (seq BIGSERIAL PRIMARY KEY, "
                    "thread_id TEXT NOT NULL, holder TEXT NOT NULL, "
                    "expires DOUBLE PRECISION NOT NULL)"
                )
                await conn.execute(
                    f"CREATE INDEX IF NOT EXISTS {WAITERS}_thread ON {WAITERS} (thread_id, seq)"
                )
        yield saver
    finally:
        await pool.close()


def _redact(url: str) -> str:
    if "@" not in url or "://" not in url:
        return url
    scheme, rest = url.split("://", 1)
    creds, host = rest.rsplit("@", 1)
    user = creds.split(":", 1)[0]
    return f"{scheme}://{user}@{host}"
