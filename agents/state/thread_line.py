"""The line of runs waiting for a thread on PostgreSQL: several processes take a thread in
the order its runs came, whichever process each came to.

A lease (``agents.state.leases``) says who holds a thread; alone, it goes to whichever
waiter polls first once it is free, and a process's own waiters, woken at once, overtook
those of another that polled on a back-off (QA: messages sent alternately to two processes
were stored 1, 4, 2, 5, 3, 6). Each waiter has a ticket in this table, numbered by the
database as it came, kept fresh while it waits; the lease goes only to the first live one.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
from typing import Any

from agents.state.lease_table import DB_NOW, LeaseTable, delete_lapsed, holder_gone

WAITERS = "skilldesk_thread_waiters"  # created with the checkpoint tables (``checkpointers``)
TICKET_S = 5.0  # a ticket its process stopped keeping fresh (it died) is passed over after this
FIRST_POLL_S = 0.1  # how often the first in line asks (its turn comes when another lets go)

# Take the lease if nobody waits (a run that came to a free thread waits in no line);
# otherwise join the line. Of the rows of this statement's snapshot, tickets committed
# before it came are ahead of it.
_COME = """
WITH ahead AS (
    SELECT 1 FROM {waiters} WHERE thread_id = %(thread)s AND expires >= {now} LIMIT 1
), lapsed AS (  -- left by processes that died elsewhere, long enough ago
    DELETE FROM {waiters} WHERE thread_id = %(thread)s AND expires < {now} - %(lease_s)s
), won AS (
    INSERT INTO {leases} SELECT %(thread)s, %(holder)s, {now} + %(lease_s)s
    WHERE NOT EXISTS (SELECT 1 FROM ahead)
    {taken_unless_held}
    RETURNING thread_id
)
INSERT INTO {waiters} (thread_id, holder, expires)
SELECT %(thread)s, %(holder)s, {now} + %(ticket_s)s WHERE NOT EXISTS (SELECT 1 FROM won)
RETURNING seq
"""

# Take the lease if this ticket is the first live one and the lease is free (or expired),
# leaving the line as it does; otherwise say who is in the way.
_TRY = """
WITH first AS (
    SELECT seq, holder FROM {waiters} WHERE thread_id = %(thread)s AND expires >= {now}
    ORDER BY seq LIMIT 1
), won AS (
    INSERT INTO {leases} SELECT %(thread)s, %(holder)s, {now} + %(lease_s)s
    WHERE (SELECT seq FROM first) = %(seq)s
    {taken_unless_held}
    RETURNING thread_id
), gone AS (
    DELETE FROM {waiters} WHERE seq = %(seq)s AND EXISTS (SELECT 1 FROM won) RETURNING seq
)
SELECT EXISTS (SELECT 1 FROM gone) AS won,
    (SELECT seq FROM first) AS first_seq, (SELECT holder FROM first) AS first_holder,
    (SELECT holder FROM {leases} WHERE thread_id = %(thread)s) AS lease_holder
"""


async def sweep_tickets(pool: Any, lapsed_s: float) -> int:
    """Delete the tickets that lapsed more than ``lapsed_s`` ago, of every thread (a thread's
    own are cleared when a run comes to it; one nobody comes to again, or deleted, kept them);
    how many. A lapsed ticket is passed over already: deleting it changes no one's turn."""
    return await delete_lapsed(pool, WAITERS, lapsed_s)


class ThreadWaiters:
    """This process's side of one thread's line: its waiters join the line one at a time
    (their tickets in the order they came here); only the first of them asks the database
    (for all of them), the others wait for it to go; and they hear at once that the thread
    was let go here (a waiter of another process finds out at its next ask)."""

    def __init__(self) -> None:
        self.joining = asyncio.Lock()
        self.freed = asyncio.Event()
        self.tickets: list[int] = []  # this process's waiting, in the line's order

    def free(self) -> None:
        """The thread was let go here, or this process's first waiter left the line."""
        self.freed.set()
        self.freed = asyncio.Event()


class ThreadLine:
    """The waiters' tickets of ``leases``, a thread lease table.

    Args:
        leases: The thread lease table (``thread_id``, ``holder``, ``expires``), on a psycopg
            async pool (rows read as dicts).
    """

    def __init__(self, leases: LeaseTable) -> None:
        self.pool = leases.pool
        self.leases = leases

    def _sql(self, template: str) -> str:
        return template.format(
            waiters=WAITERS,
            leases=self.leases.table,
            now=DB_NOW,
            taken_unless_held=self.leases.taken_unless_held(),
        )

    async def take(
        self,
        thread_id: str,
        holder: str,
        lease_s: float,
        here: ThreadWaiters,
        in_line: asyncio.Event | None = None,
    ) -> None:
        """Take the thread for ``holder`` (its lease, for ``lease_s``) once the runs that came
        before, in any process, have had it; ``in_line`` is set once it took it or has its
        ticket. Cancelled (or failing), it leaves no ticket or lease of ``holder`` behind,
        whichever statement the cancel cut."""
        seq: int | None = None
        try:
            async with here.joining:
                seq = await self._come(thread_id, holder, lease_s)
                if in_line is not None:
                    in_line.set()
                if seq is None:
                    return  # free, and nobody waited
                bisect.insort(here.tickets, seq)
            await self._wait(thread_id, holder, lease_s, seq, here)
        except BaseException:
            if seq is not None and seq in here.tickets:
                here.tickets.remove(seq)
            # A statement cut by a cancel may have been done in the database: gone by holder.
            forgetting = asyncio.ensure_future(self._forget(thread_id, holder))
            try:
                with contextlib.suppress(Exception):
                    await asyncio.shield(forgetting)
            finally:
                here.free()  # the next of this process's waiters asks now
            raise

    async def _wait(
        self, thread_id: str, holder: str, lease_s: float, seq: int, here: ThreadWaiters
    ) -> None:
        wait, cap = 0.02, 0.5
        while True:
            freed = here.freed  # before the ask: a let-go meanwhile counts
            if here.tickets[0] == seq:  # this process's first: it asks, for all of them
                taken, first = await self._try(thread_id, holder, lease_s, seq, here.tickets)
                if taken:
                    here.tickets.remove(seq)
                    here.free()  # the next of this process's waiters asks now
                    return
                cap = FIRST_POLL_S if first else 0.5
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(freed.wait(), wait)
            wait = min(wait * 2, cap)

    async def _come(self, thread_id: str, holder: str, lease_s: float) -> int | None:
        """Take the thread if it is free and nobody waits for it (None); otherwise join its
        line: the ticket to try with."""
        values = {"thread": thread_id, "holder": holder, "lease_s": lease_s, "ticket_s": TICKET_S}
        async with self.pool.connection() as conn:
            cursor = await conn.execute(self._sql(_COME), values)
            row = await cursor.fetchone()
        return None if row is None else int(row["seq"])

    async def _try(
        self, thread_id: str, holder: str, lease_s: float, seq: int, kept: list[int]
    ) -> tuple[bool, bool]:
        """Take the thread if ticket ``seq`` is the first in line and the thread is free,
        leaving the line: (taken, first in line). Otherwise keep this process's tickets
        (``kept``) fresh and clear the way of holders and waiters whose processes are gone
        (``holder_gone``)."""
        values = {"thread": thread_id, "holder": holder, "lease_s": lease_s, "seq": seq}
        async with self.pool.connection() as conn:
            cursor = await conn.execute(self._sql(_TRY), values)
            row = await cursor.fetchone()
            if row["won"]:
                return True, True
            await conn.execute(  # its place kept, even if its lapsed ticket was cleared
                f"INSERT INTO {WAITERS} VALUES (%s, %s, %s, {DB_NOW} + %s) "
                "ON CONFLICT (seq) DO UPDATE SET expires = EXCLUDED.expires",
                (seq, thread_id, holder, TICKET_S),
            )
            if len(kept) > 1:
                await conn.execute(
                    f"UPDATE {WAITERS} SET expires = {DB_NOW} + %s WHERE seq = ANY(%s)",
                    (TICKET_S, kept[1:]),
                )
            first = row["first_holder"]
            if row["first_seq"] not in (None, seq) and first is not None and holder_gone(first):
                await conn.execute(f"DELETE FROM {WAITERS} WHERE seq = %s", (row["first_seq"],))
        lease = row["lease_holder"]
        if lease is not None and lease != holder and holder_gone(lease):
            await self.leases.release(thread_id, lease)  # its process is gone
        return False, row["first_seq"] == seq

    async def _forget(self, thread_id: str, holder: str) -> None:
        """Whatever ``holder`` has of the thread: its ticket, and the lease if it took it."""
        async with self.pool.connection() as conn:
            await conn.execute(f"DELETE FROM {WAITERS} WHERE holder = %s", (holder,))
        await self.leases.release(thread_id, holder)
