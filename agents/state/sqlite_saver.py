"""The SQLite checkpoint saver: short operations on the event loop, long ones and the WAL's
copy on threads of their own, each channel's value stored once per version."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from functools import partial
from typing import Any, TypeVar

import structlog
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
)
from langgraph.checkpoint.sqlite import SqliteSaver

from agents import metrics
from agents.state.codec import KeptCodec
from agents.state.readonce import ReadOnce
from agents.state.serial import SerialThread

T = TypeVar("T")
log = structlog.get_logger(__name__)

BLOBS = "skilldesk_blobs"  # channel values by version, each written once


class ThreadedSqliteSaver(KeptCodec, SqliteSaver):
    """LangGraph's SQLite checkpointer whose short operations run on the event loop and long
    ones on a thread of its own, and whose checkpoints store each channel's value once per
    version.

    A turn makes some 19 store operations (checkpoints, pending writes, the thread's record,
    its trace), each a fraction of a millisecond of work that holds the GIL for most of it.
    Handed to a thread, each one also cost a hand-over both ways, and under load waited for
    the GIL at every statement: 3.8x its CPU time in wall time, the turns queued behind it
    (bench/load at saturation, 11 alternating runs against the thread: median +9 % turns/s).
    So an operation runs on the event loop: at once when the thread has nothing in hand,
    else once the thread is through what it has (``run``). Queued on the thread behind a long
    job instead, at saturation the queue never emptied again: every operation went to the
    thread, and the thread, waiting for the GIL at each statement, took a quarter of a core.
    What may take long (pruning, deleting a thread, a whole history) runs on the thread
    (``run_long``) while the event loop serves on. In WAL mode with ``synchronous=NORMAL`` a
    commit writes to the WAL and never syncs; the sync comes with a WAL checkpoint, at most
    every ``wal_every_s`` after writes (SQLite's own, on the committing connection, is turned
    off): a thread and a connection of their own copy the WAL into the file (15-25 ms once a
    second on the store's connection, every operation waiting), then the store's thread
    copies what came meanwhile (under a millisecond), after which the next write starts the
    WAL again from its beginning (it never would while writes go on during the copy).
    (The aiosqlite-based ``AsyncSqliteSaver`` crosses to its thread and back for every
    statement, commit and cursor close: seven round trips for one step's writes.)

    LangGraph's SQLite saver writes every channel's value into every checkpoint: a step that
    changes only the route rewrites the whole history and summary, so a long thread wrote
    over 100 KB per step. Here, as PostgreSQL's saver does, a checkpoint holds the channels'
    versions and each value lives in ``skilldesk_blobs`` under its version, written when it
    changes. Checkpoints written before (values inline) are read as they are.
    """

    wal_every_s = 1.0  # how often at most the thread copies the WAL into the file

    def __init__(self, conn: sqlite3.Connection) -> None:
        super().__init__(conn)
        self._worker = SerialThread("skilldesk-sqlite")
        self._wal_worker = SerialThread("skilldesk-sqlite-wal")
        self._wal_conn: sqlite3.Connection | None = None  # the WAL thread's
        self._wal_copied = False  # set by the WAL thread: the store's thread completes it
        self._file = str(conn.execute("PRAGMA database_list").fetchone()[2])  # "": in memory
        self._has_blobs: set[tuple[str, str]] = set()  # threads whose blobs hold every value
        self._wal_synced = time.monotonic()
        self._wal_changes = 0  # the connection's changes at the last WAL checkpoint

    def setup(self) -> None:
        # The base class calls this on every cursor, holding its lock: no lock taken here.
        first = not self.is_setup
        super().setup()
        if first:
            with self.conn:
                self.conn.execute(
                    f"CREATE TABLE IF NOT EXISTS {BLOBS} (thread_id TEXT NOT NULL, "
                    "checkpoint_ns TEXT NOT NULL DEFAULT '', channel TEXT NOT NULL, "
                    "version TEXT NOT NULL, type TEXT NOT NULL, blob BLOB, "
                    "PRIMARY KEY (thread_id, checkpoint_ns, channel, version))"
                )

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        thread_id = str(config["configurable"]["thread_id"])
        ns = str(config["configurable"].get("checkpoint_ns", ""))
        values = checkpoint["channel_values"]
        versions = checkpoint["channel_versions"]
        changed = dict(new_versions)
        if (thread_id, ns) not in self._has_blobs:
            if not self._blobbed(thread_id, ns):  # a new thread, or one written inline before
                changed = {c: v for c, v in versions.items() if c in values or c in changed}
            self._has_blobs.add((thread_id, ns))
        rows = []
        for channel, version in changed.items():
            kind, blob = self._dumps(values[channel]) if channel in values else ("empty", None)
            rows.append((thread_id, ns, channel, str(version), kind, blob))
        # The values and the checkpoint in one transaction (one commit, not two): the base
        # class commits what this statement began.
        with self.lock:
            try:
                self.conn.executemany(
                    f"INSERT OR REPLACE INTO {BLOBS} VALUES (?, ?, ?, ?, ?, ?)", rows
                )
            except BaseException:
                self.conn.rollback()
                raise
        kept = {c: v for c, v in values.items() if c not in versions}  # unversioned: inline
        return super().put(config, {**checkpoint, "channel_values": kept}, metadata, new_versions)

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        found = super().get_tuple(config)
        if found is None:
            return None
        configurable = found.config["configurable"]
        if "checkpoint_ns" not in configurable:
            # Asked by id, the base class answers with the config it was given; LangGraph's
            # writes to that checkpoint then need its namespace (a fork of a failed run
            # from its failed node: KeyError), which PostgreSQL's saver always gives.
            whole = {**configurable, "checkpoint_ns": ""}
            found = found._replace(config={**found.config, "configurable": whole})
        return self._filled(found)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        # Read to the end first: the base class holds its lock while it yields.
        rows = [*super().list(config, filter=filter, before=before, limit=limit)]
        for found in rows:
            yield self._filled(found)

    def delete_thread(self, thread_id: str) -> None:
        super().delete_thread(thread_id)
        with self.lock, self.conn:
            self.conn.execute(f"DELETE FROM {BLOBS} WHERE thread_id = ?", (str(thread_id),))
        self._has_blobs = {k for k in self._has_blobs if k[0] != str(thread_id)}

    def _blobbed(self, thread_id: str, ns: str) -> bool:
        with self.lock:
            row = self.conn.execute(
                f"SELECT 1 FROM {BLOBS} WHERE thread_id = ? AND checkpoint_ns = ? LIMIT 1",
                (thread_id, ns),
            ).fetchone()
        return row is not None

    def _filled(self, found: CheckpointTuple) -> CheckpointTuple:
        """The tuple with every versioned channel's value read from the blobs."""
        checkpoint = found.checkpoint
        values = dict(checkpoint["channel_values"])
        wanted = [(c, str(v)) for c, v in checkpoint["channel_versions"].items() if c not in values]
        if not wanted:
            return found
        configurable = found.config["configurable"]
        thread_id = str(configurable["thread_id"])
        ns = str(configurable.get("checkpoint_ns", ""))
        # One index search per value. SQLite (3.40) answers `(channel, version) IN (VALUES
        # ...)`, and an OR of the pairs, by scanning every blob of the thread: a read that
        # grew with the thread's length (0.3 ms at turn 10, 0.9 ms at turn 100).
        one = (
            f"SELECT channel, type, blob FROM {BLOBS} WHERE thread_id = ? "
            "AND checkpoint_ns = ? AND channel = ? AND version = ?"
        )
        with self.lock:
            rows = self.conn.execute(
                " UNION ALL ".join(one for _ in wanted),
                [x for channel, version in wanted for x in (thread_id, ns, channel, version)],
            ).fetchall()
        for channel, kind, blob in rows:
            if kind != "empty":
                values[channel] = self._loads(kind, blob)
        return found._replace(checkpoint={**checkpoint, "channel_values": values})

    async def run(self, function: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """A short store operation (a read or write of a few rows) on the event loop: at once
        when the saver's thread has nothing in hand, else once it is through what it has (the
        connection is the thread's meanwhile)."""
        while self._worker.in_hand:
            await self._worker.drained()
        result = function(*args, **kwargs)
        self._sync_wal_soon()
        # Then the other tasks' turn, as the hand-over to the thread gave them: a loop of
        # operations (a fork copying a long thread's traces) does not hold the event loop.
        await asyncio.sleep(0)
        return result

    async def run_long(self, function: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """A store operation that may take long (many rows): on the saver's thread, in order
        with the others, the event loop serving meanwhile."""
        return await self._worker.run(partial(function, *args, **kwargs))

    def _sync_wal_soon(self) -> None:
        """After an operation on the event loop: the WAL copied into the file when a copy is
        due (nothing to copy after reads alone), and completed once the WAL thread is
        through."""
        if self._wal_copied:
            self._wal_copied = False
            self._worker.submit(self._complete_wal)
        now = time.monotonic()
        if now - self._wal_synced < self.wal_every_s or self._wal_worker.in_hand:
            return
        changes = self.conn.total_changes
        if changes == self._wal_changes or not self._file:  # in memory: no WAL
            return
        self._wal_synced, self._wal_changes = now, changes
        self._wal_worker.submit(self._copy_wal)

    def _copy_wal(self) -> None:
        # PASSIVE: copies what no reader still needs and syncs, waits for nobody (writes go
        # on meanwhile). On a connection of its own: the store's is never held for it.
        try:
            if self._wal_conn is None:
                self._wal_conn = sqlite3.connect(self._file, check_same_thread=False)
            self._wal_conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
            self._wal_copied = True
        except sqlite3.Error as exc:  # the next one retries; the commits are safe in the WAL
            log.warning("sqlite.wal_checkpoint_failed", error=str(exc))

    def _complete_wal(self) -> None:
        # What came during the copy, on the store's connection with no write under way: the
        # WAL is then wholly in the file, and the next write reuses its pages from the start,
        # so it stays about one interval's writes long.
        try:
            with self.lock:
                self.conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        except sqlite3.Error as exc:
            log.warning("sqlite.wal_checkpoint_failed", error=str(exc))

    def close(self) -> None:
        """Stop the saver's threads (after the connection is closed)."""
        self._worker.shutdown()
        self._wal_worker.shutdown()
        if self._wal_conn is not None:
            self._wal_conn.close()

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await self.run(self.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        found = await self.run_long(
            lambda: list(self.list(config, filter=filter, before=before, limit=limit))
        )
        for item in found:
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        with metrics.timed(metrics.CHECKPOINT_WRITE_SECONDS, "sqlite"):
            return await self.run(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        await self.run(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await self.run_long(self.delete_thread, thread_id)

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        return await self.run(
            lambda: self.get_delta_channel_history(config=config, channels=channels)
        )


class ReadOnceSqliteSaver(ReadOnce, ThreadedSqliteSaver):
    """The service's SQLite saver: a run's read of a thread is not repeated (``ReadOnce``)."""
