"""Checkpointers: an SQLite file by default, PostgreSQL for several service processes."""

from __future__ import annotations

import asyncio
import os
import queue
import socket
import sqlite3
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, suppress
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import structlog
from langchain_core.messages import BaseMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
)
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.sqlite import SqliteSaver

from agents import metrics
from agents.errors import ConfigError
from agents.state.readonce import ReadOnce

T = TypeVar("T")
log = structlog.get_logger(__name__)


def sqlite_url(path: Path) -> str:
    """The checkpoint URL of an SQLite file."""
    return f"sqlite:///{path}"


@asynccontextmanager
async def open_checkpointer(url: str) -> AsyncIterator[BaseCheckpointSaver[Any]]:
    """Open (and set up) the checkpointer a URL names; close it on exit.

    ``sqlite:///relative/file.sqlite``, ``sqlite:////absolute/file.sqlite`` (the SQLAlchemy
    convention), ``sqlite:///:memory:`` and ``postgresql://user@host:port/db`` are understood.

    Raises:
        ConfigError: for any other scheme, or when the store cannot be opened.
    """
    if url.startswith("sqlite://"):
        path = url.removeprefix("sqlite:///") if url.startswith("sqlite:///") else url[9:]
        async with _sqlite(path or ":memory:") as saver:
            yield saver
    elif url.startswith(("postgresql://", "postgres://")):
        async with _postgres(url) as saver:
            yield saver
    else:
        raise ConfigError(
            f"checkpoint URL {url!r} (SKILLDESK_CHECKPOINT_URL) has an unknown scheme",
            fix="use sqlite:///path/to/file.sqlite or postgresql://user@host:5432/db",
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


BLOBS = "skilldesk_blobs"  # channel values by version, each written once


class KeptCodec:
    """Mixed into a checkpoint saver (before it): a history is written from its messages'
    kept encodings, and a large blob read again gives the value it gave (same bytes, same
    value), so a turn neither encodes nor decodes a thread's whole history at each step.
    Values read are shared between the reads that get them: channel values are replaced,
    never changed in place (LangGraph's reducers and this project's make new ones)."""

    kept_messages = 16384  # messages' encodings kept
    kept_blobs = 512  # decoded blobs kept
    serde: SerializerProtocol  # the saver's

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._codec_lock = threading.Lock()
        # Messages' msgpack encodings, by the message object (never changed once made).
        self._encoded: OrderedDict[int, tuple[BaseMessage, bytes]] = OrderedDict()
        self._blobs: OrderedDict[tuple[str, bytes], Any] = OrderedDict()

    def _dumps(self, value: Any) -> tuple[str, bytes]:
        """``serde.dumps_typed(value)``; a list of messages from the messages encoded before
        (a msgpack array is its items' encodings one after the other): a turn encodes its
        new messages, not the whole history again at each step."""
        if not isinstance(value, list) or len(value) < 8:
            return self.serde.dumps_typed(value)
        parts: list[bytes] = []
        with self._codec_lock:
            for item in value:
                known = self._encoded.get(id(item))
                if known is not None:  # kept alive in here: the id is still this object's
                    self._encoded.move_to_end(id(item))
                    parts.append(known[1])
                    continue
                if not isinstance(item, BaseMessage):
                    return self.serde.dumps_typed(value)
                kind, blob = self.serde.dumps_typed(item)
                if kind != "msgpack":
                    return self.serde.dumps_typed(value)
                self._encoded[id(item)] = (item, blob)
                parts.append(blob)
            while len(self._encoded) > self.kept_messages:
                self._encoded.popitem(last=False)
        blob = _msgpack_array(len(parts)) + b"".join(parts)
        if len(blob) >= _KEPT_BLOB_BYTES:  # the next read of these bytes: this value
            self._keep_blob(("msgpack", blob), value)
        return "msgpack", blob

    def _loads(self, kind: str, blob: bytes) -> Any:
        """``serde.loads_typed((kind, blob))``, a large blob's value kept by its bytes."""
        if len(blob) < _KEPT_BLOB_BYTES:
            return self.serde.loads_typed((kind, blob))
        key = (kind, blob)
        with self._codec_lock:
            if key in self._blobs:
                self._blobs.move_to_end(key)
                return self._blobs[key]
        value = self.serde.loads_typed((kind, blob))
        self._keep_blob(key, value)
        return value

    def _keep_blob(self, key: tuple[str, bytes], value: Any) -> None:
        with self._codec_lock:
            self._blobs[key] = value
            while len(self._blobs) > self.kept_blobs:
                self._blobs.popitem(last=False)


_KEPT_BLOB_BYTES = 2048  # smaller blobs decode faster than they are looked up


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
        return None if found is None else self._filled(found)

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


def _msgpack_array(length: int) -> bytes:
    """The header of a msgpack array of ``length`` items."""
    if length < 16:
        return bytes([0x90 | length])
    if length < 1 << 16:
        return b"\xdc" + length.to_bytes(2, "big")
    return b"\xdd" + length.to_bytes(4, "big")


class ReadOnceSqliteSaver(ReadOnce, ThreadedSqliteSaver):
    """The service's SQLite saver: a run's read of a thread is not repeated (``ReadOnce``)."""


class SerialThread:
    """One thread that runs functions in the order they are given, each result handed back
    to the coroutine awaiting it.

    What ``run_in_executor`` on a one-thread pool does, without its two futures a job (a
    ``concurrent.futures`` one, with its lock and condition, chained to the asyncio one) and
    the pool's bookkeeping. A job whose caller was cancelled still runs (a write is not
    half-done), its result dropped. ``in_hand`` counts the jobs given and not yet through
    (read and changed on the event loop only).
    """

    def __init__(self, name: str) -> None:
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], Any, Any] | None] = (
            queue.SimpleQueue()
        )
        self.in_hand = 0
        self._drained: list[asyncio.Future[None]] = []  # told when in_hand is back to 0
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    async def run(self, function: Callable[[], T]) -> T:
        """``function()`` on the thread, after the jobs given before it."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self.in_hand += 1
        self._jobs.put((function, loop, future))
        return await future

    def submit(self, function: Callable[[], Any]) -> None:
        """``function()`` on the thread, after the jobs given before it; nobody waits for it
        (it reports its own errors)."""
        self.in_hand += 1
        self._jobs.put((function, asyncio.get_running_loop(), None))

    def drained(self) -> asyncio.Future[None]:
        """Done once no job is in hand (at once if none is)."""
        future = asyncio.get_running_loop().create_future()
        if self.in_hand:
            self._drained.append(future)
        else:
            future.set_result(None)
        return future

    def shutdown(self) -> None:
        """Run the jobs given so far, then end the thread."""
        self._jobs.put(None)
        self._thread.join()

    def _serve(self) -> None:
        while (job := self._jobs.get()) is not None:
            function, loop, future = job
            result, error = None, None
            try:
                result = function()
            except Exception as exc:  # handed to the caller, as an executor does
                error = exc
            except BaseException as exc:  # the thread goes on serving the jobs after it
                error = RuntimeError(f"the store's thread was interrupted: {exc!r}")
            with suppress(RuntimeError):  # a closed loop: nobody awaits it any more
                loop.call_soon_threadsafe(self._settle, future, result, error)

    def _settle(
        self, future: asyncio.Future[Any] | None, result: Any, error: BaseException | None
    ) -> None:
        self.in_hand -= 1
        if not self.in_hand:
            waiting, self._drained = self._drained, []
            for drained in waiting:
                if not drained.done():
                    drained.set_result(None)
        if future is None or future.done():  # submitted, or its caller was cancelled
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)


@asynccontextmanager
async def _postgres(url: str) -> AsyncIterator[BaseCheckpointSaver[Any]]:
    import psycopg
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
    from psycopg.rows import dict_row
    from psycopg_pool import AsyncConnectionPool

    try:  # one direct connection first: a refused or misspelt URL fails now, not after a pool wait
        probe = await psycopg.AsyncConnection.connect(url, connect_timeout=5)
        await probe.close()
    except Exception as exc:
        raise ConfigError(
            f"cannot connect to PostgreSQL at {_redact(url)} (SKILLDESK_CHECKPOINT_URL): {exc}",
            fix="check that the server is running and the URL, user and database are right",
        ) from exc
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
        await saver.setup()
        async with pool.connection() as conn:  # the leases that hold a thread for one run
            await conn.execute(
                f"CREATE TABLE IF NOT EXISTS {LEASES} (thread_id TEXT PRIMARY KEY, "
                "holder TEXT NOT NULL, expires DOUBLE PRECISION NOT NULL)"
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


POOL_SIZE = 10  # connections to PostgreSQL a process keeps at most
LEASES = "skilldesk_thread_leases"
LEASE_S = 30.0  # a holder that stops renewing (its process died) loses the thread after this
_NOW = "extract(epoch from clock_timestamp())"  # the database's clock: one for every process


@asynccontextmanager
async def thread_lock(
    saver: BaseCheckpointSaver[Any], thread_id: str, lease_s: float = LEASE_S
) -> AsyncIterator[None]:
    """Hold the thread for one run across processes (a lease row in PostgreSQL).

    Several service processes behind one load balancer share a PostgreSQL checkpointer; two
    turns of one thread arriving at two processes would otherwise both start from the same
    checkpoint. The holder renews its lease while the run goes on and deletes it at the end;
    a process that dies leaves a lease that expires, so another can take the thread over. A
    lease holds no connection: a session advisory lock did, one per run under way, and 50
    concurrent runs emptied the pool that their own checkpoint writes needed. SQLite is one
    process's embedded store: its in-process lock is enough.
    """
    pool: Any = getattr(saver, "conn", None)
    if not hasattr(pool, "connection") or not type(saver).__name__.startswith("AsyncPostgres"):
        yield
        return
    holder = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
    await _lease(pool, thread_id, holder, lease_s)
    _HELD.add(holder)
    renewing = asyncio.create_task(_renew(pool, thread_id, holder, lease_s))
    try:
        yield
    finally:
        _HELD.discard(holder)
        renewing.cancel()
        await asyncio.gather(renewing, return_exceptions=True)
        async with pool.connection() as conn:
            await conn.execute(
                f"DELETE FROM {LEASES} WHERE thread_id = %s AND holder = %s", (thread_id, holder)
            )


_HELD: set[str] = set()  # the leases this process holds


def _dead(holder: str) -> bool:
    """Whether a lease's holder is a process of this machine that is gone (it need not wait
    for the lease to expire: a restarted service takes its predecessor's runs at once)."""
    host, pid, _ = [*holder.rsplit(":", 2), "", ""][:3]
    if host != socket.gethostname() or not pid.isdigit():
        return False
    if int(pid) == os.getpid():
        return holder not in _HELD  # an earlier process that had this pid
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


async def lease_alive(saver: BaseCheckpointSaver[Any], thread_id: str) -> bool:
    """Whether a process holds the thread now (its lease unexpired and, on this machine, its
    process running); always False for a store of one process (SQLite, memory): a run it
    left marked running has no process."""
    pool: Any = getattr(saver, "conn", None)
    if not hasattr(pool, "connection") or not type(saver).__name__.startswith("AsyncPostgres"):
        return False
    async with pool.connection() as conn:
        cursor = await conn.execute(
            f"SELECT holder FROM {LEASES} WHERE thread_id = %s AND expires >= {_NOW}",
            (thread_id,),
        )
        row = await cursor.fetchone()
    return row is not None and not _dead(str(row["holder"]))


async def _lease(pool: Any, thread_id: str, holder: str, lease_s: float) -> None:
    """Wait until the thread's lease is free (or expired), then take it."""
    wait = 0.02
    while True:
        async with pool.connection() as conn:
            cursor = await conn.execute(
                f"INSERT INTO {LEASES} VALUES (%s, %s, {_NOW} + %s) ON CONFLICT (thread_id) "
                f"DO UPDATE SET holder = EXCLUDED.holder, expires = EXCLUDED.expires "
                f"WHERE {LEASES}.expires < {_NOW} RETURNING holder",
                (thread_id, holder, lease_s),
            )
            if await cursor.fetchone() is not None:
                return
            cursor = await conn.execute(
                f"SELECT holder FROM {LEASES} WHERE thread_id = %s", (thread_id,)
            )
            row = await cursor.fetchone()
            if row is not None and _dead(str(row["holder"])):  # its process is gone: free it
                await conn.execute(
                    f"DELETE FROM {LEASES} WHERE thread_id = %s AND holder = %s",
                    (thread_id, row["holder"]),
                )
                continue
        await asyncio.sleep(wait)
        wait = min(wait * 2, 0.5)


async def _renew(pool: Any, thread_id: str, holder: str, lease_s: float) -> None:
    while True:
        await asyncio.sleep(lease_s / 3)
        async with pool.connection() as conn:
            await conn.execute(
                f"UPDATE {LEASES} SET expires = {_NOW} + %s WHERE thread_id = %s AND holder = %s",
                (lease_s, thread_id, holder),
            )
