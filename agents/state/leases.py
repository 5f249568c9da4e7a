"""One run at a time per thread: an asyncio lock in a process and, on PostgreSQL, a lease row
that every process sees; on SQLite, the process a thread's record names as running its run."""

from __future__ import annotations

import asyncio
import functools
import os
import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import structlog
from langgraph.checkpoint.base import BaseCheckpointSaver

from agents.cancelling import stop_tasks
from agents.state.lease_table import LeaseTable, is_live, new_holder, set_live, shared_pool
from agents.state.thread_line import ThreadLine, ThreadWaiters, sweep_tickets

log = structlog.get_logger(__name__)

LEASES = "skilldesk_thread_leases"  # created with the checkpoint tables (``checkpointers``)
LEASE_S = 30.0  # a holder that stops renewing (its process died) loses the thread after this
SWEPT_AFTER_S = 10 * LEASE_S  # retention deletes leases and line tickets lapsed this long


@asynccontextmanager
async def thread_lock(
    saver: BaseCheckpointSaver[Any],
    thread_id: str,
    lease_s: float = LEASE_S,
    here: ThreadWaiters | None = None,
    in_line: asyncio.Event | None = None,
    lost: Callable[[], None] | None = None,
) -> AsyncIterator[None]:
    """Hold the thread for one run across processes (a lease row in PostgreSQL), taken in
    the order the runs came (``ThreadLine``). Should the lease be lost while held (renewals
    failed a whole lease, and another process took the thread), ``lost`` (when given) is
    called and the task holding the thread is cancelled: two runs must not write one thread.

    Several service processes behind one load balancer share a PostgreSQL checkpointer; two
    turns of one thread arriving at two processes would otherwise both start from the same
    checkpoint. The holder renews its lease while the run goes on and deletes it at the end;
    a process that dies leaves a lease that expires, so another can take the thread over. A
    lease holds no connection: a session advisory lock did, one per run under way, and 50
    concurrent runs emptied the pool that their own checkpoint writes needed. SQLite is one
    process's embedded store: its in-process lock is enough.
    """
    pool = shared_pool(saver)
    if pool is None:
        if in_line is not None:
            in_line.set()
        yield
        return
    here = here or ThreadWaiters()
    leases = LeaseTable(pool, LEASES, "thread_id")
    holder = new_holder()  # one per run: a lease this process left behind is free at once
    set_live(holder, True)  # a waiter's ticket is live too
    try:
        await ThreadLine(leases).take(thread_id, holder, lease_s, here, in_line)
    except BaseException:
        set_live(holder, False)
        raise
    holding = asyncio.current_task()
    renewing = asyncio.create_task(
        _renew(leases, thread_id, holder, lease_s, functools.partial(_stop_holder, holding, lost))
    )
    try:
        yield
    finally:
        set_live(holder, False)
        # Shielded: a cancel of the holder as it lets go (a stop's) leaves the lease let go
        # all the same, not held until it expires (a stop waits for it: ``letting_go``).
        release = asyncio.ensure_future(_let_go(leases, thread_id, holder, renewing, here))
        _LETTING_GO.add(release)
        release.add_done_callback(_LETTING_GO.discard)
        await asyncio.shield(release)


_LETTING_GO: set[asyncio.Future[None]] = set()  # this process's leases being let go


async def letting_go(timeout_s: float) -> None:
    """Wait at most ``timeout_s`` for the leases this process is letting go, their holders
    cut off meanwhile (a stop closing the store after would leave them held until they
    expire, and another process would resume their runs only then)."""
    if _LETTING_GO and timeout_s > 0:
        await asyncio.wait(list(_LETTING_GO), timeout=timeout_s)


async def _let_go(
    leases: LeaseTable,
    thread_id: str,
    holder: str,
    renewing: asyncio.Task[None],
    here: ThreadWaiters,
) -> None:
    await stop_tasks([renewing])
    try:
        await leases.release(thread_id, holder)
    finally:
        here.free()


def _stop_holder(holding: asyncio.Task[Any] | None, lost: Callable[[], None] | None) -> None:
    # Only a holder that can say so is cancelled (a run); a short change outside a run (a
    # delete, a prune) goes on to its end, logged.
    if lost is not None and holding is not None:
        lost()
        holding.cancel()


async def sweep_thread_leases(saver: BaseCheckpointSaver[Any]) -> int:
    """Delete the thread leases and line tickets that processes which died left long ago
    (ten leases' length past their expiry: a holder whose renewals failed that long has
    long lost it to any claimant); how many. Nothing on a store of one process."""
    pool = shared_pool(saver)
    if pool is None:
        return 0
    leases = await LeaseTable(pool, LEASES, "thread_id").sweep(SWEPT_AFTER_S)
    return leases + await sweep_tickets(pool, SWEPT_AFTER_S)


async def lease_alive(saver: BaseCheckpointSaver[Any], thread_id: str) -> bool:
    """Whether a process holds the thread now (its lease unexpired and, on this machine, its
    process running); always False for a store of one process (SQLite, memory): a run it
    left marked running has no process."""
    pool = shared_pool(saver)
    if pool is None:
        return False
    return thread_id in await LeaseTable(pool, LEASES, "thread_id").alive([thread_id])


def this_process() -> str:
    """This process as a thread's record names the one running its run: ``host:pid:start``
    (its start time tells it from a later process given the same pid). Read once a process
    (every turn writes it)."""
    return _process(os.getpid())


@functools.cache
def _process(pid: int) -> str:  # by pid: a forked child is another process
    return f"{socket.gethostname()}:{pid}:{_started(pid)}"


def process_running(process: str | None) -> bool:
    """Whether ``process`` (``this_process`` of the one running a thread's run) is another
    process of this machine that still runs: SQLite has no leases, and a command beside the
    service on its file (``skilldesk threads delete``) would otherwise take a thread it is
    answering for idle. False for this process (its runs are ``Conversations.busy``), one of
    another machine (not knowable here) and none named (a record from before)."""
    host, pid, started = [*(process or "").split(":"), "", "", ""][:3]
    if host != socket.gethostname() or not pid.isdigit() or int(pid) == os.getpid():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's: it runs
        pass
    now = _started(int(pid))
    return now != "Z" and (not started or not now or now == started)


def process_ended_here(process: str | None) -> bool:
    """Whether ``process`` (``this_process`` of another) was a process of this machine that
    has ended: what it left is this machine's to take up (another machine's is not knowable
    here, and this process's own is its own)."""
    host = (process or "").split(":")[0]
    return (
        host == socket.gethostname() and process != this_process() and not process_running(process)
    )


def _started(pid: int) -> str:
    """When process ``pid`` started (clock ticks since boot, from ``/proc``; ``Z`` for a
    zombie, which has ended); empty where there is no ``/proc``."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii")
    except OSError:
        return ""
    fields = stat.rsplit(")", 1)[-1].split()  # after the name, which may hold spaces
    return "Z" if fields[0] == "Z" else fields[19]


async def _renew(
    leases: LeaseTable, thread_id: str, holder: str, lease_s: float, lost: Callable[[], None]
) -> None:
    # A renewal that fails (the pool timed out, PostgreSQL restarting) is tried again at the
    # next beat: ending here would let the lease expire under the run and another process
    # take the thread while it goes on. A lease that expired while still this holder's
    # renews all the same (nobody took it); one that renews nothing was taken by another
    # process once it expired (its row is another's, or gone: taken, used and let go), so
    # the thread's checkpoints may have gone on without this run: the holder is told
    # (``lost``) and renewal ends. Never taken back: a claim then would succeed once the
    # other let go, and this run would write over the other's turn. It ends once its holder
    # lets go (``set_live``), not only when cancelled: Python 3.11's ``asyncio.wait_for``,
    # which psycopg's pool waits for a connection with, drops a cancel that lands as its
    # result comes, and the loop went on for good while the run letting go of the thread
    # waited for it to end.
    while is_live(holder):
        await asyncio.sleep(lease_s / 3)
        if not is_live(holder):
            return
        try:
            if thread_id in await leases.renew([thread_id], holder, lease_s):
                continue
        except Exception as exc:
            log.warning("thread.lease_renew_failed", thread_id=thread_id, error=str(exc))
            continue
        if is_live(holder):  # not let go meanwhile: its run goes on without the thread
            log.error("thread.lease_lost", thread_id=thread_id, holder=holder)
            lost()
        return


class ThreadLocks:
    """One run at a time per thread: two concurrent turns would both start from the same
    checkpoint and the later write would drop the other's messages. The asyncio lock covers
    one process; on PostgreSQL a renewed lease (``lease_s``), taken in the order the runs
    came to any process, covers several."""

    def __init__(self, lease_s: float = LEASE_S) -> None:
        self.lease_s = lease_s
        self._locks: dict[str, asyncio.Lock] = {}
        self._here: dict[str, ThreadWaiters] = {}
        self._waiting: dict[str, int] = {}

    @asynccontextmanager
    async def hold(
        self,
        thread_id: str,
        checkpointer: Any,
        in_line: asyncio.Event | None = None,
        lost: Callable[[], None] | None = None,
    ) -> AsyncIterator[None]:
        """Wait for the thread, then hold it (in this process and in the store);
        ``in_line`` is set once the caller is in the thread's line; ``lost`` is called
        before the caller's task is cancelled, should another process take the thread over
        (``thread_lock``)."""
        self._waiting[thread_id] = self._waiting.get(thread_id, 0) + 1
        try:
            if shared_pool(checkpointer) is None:  # the store's part is nothing, or a fault
                lock = self._locks.setdefault(thread_id, asyncio.Lock())
                if in_line is not None:  # an asyncio lock takes its waiters in order
                    in_line.set()
                async with lock, thread_lock(checkpointer, thread_id, self.lease_s):
                    yield
            else:  # the line orders this process's waiters with the others'
                here = self._here.setdefault(thread_id, ThreadWaiters())
                async with thread_lock(checkpointer, thread_id, self.lease_s, here, in_line, lost):
                    yield
        finally:
            self._waiting[thread_id] -= 1
            if not self._waiting[thread_id]:  # nobody else waits: forget the lock
                del self._waiting[thread_id]
                self._locks.pop(thread_id, None)
                self._here.pop(thread_id, None)
