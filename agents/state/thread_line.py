"""The line of runs waiting for a thread on PostgreSQL: several processes take a thread in
the order its runs came, whichever process each came to.

A lease (``agents.state.leases``) says who holds a thread; alone, it goes to whichever
waiter polls first once it is free, and a process's own waiters, woken at once, overtook
those of another that polled on a back-off (QA: messages sent alternately to two processes
were stored 1, 4, 2, 5, 3, 6). Each waiter has a ticket in this table, numbered by the
database as it came, kept fresh while it waits; the lease goes only to the first live one.
"""

from __future__ import annotations

from typing import Any

from agents.state.lease_table import holder_gone

WAITERS = "skilldesk_thread_waiters"  # created with the checkpoint tables (``checkpointers``)
_NOW = "extract(epoch from clock_timestamp())"

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
    ON CONFLICT (thread_id) DO UPDATE SET holder = EXCLUDED.holder, expires = EXCLUDED.expires
    WHERE {leases}.expires < {now} OR {leases}.holder = EXCLUDED.holder
    RETURNING thread_id
)
INSERT INTO {waiters} (thread_id, holder, expires)
SELECT %(thread)s, %(holder)s, {now} + %(lease_s)s WHERE NOT EXISTS (SELECT 1 FROM won)
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
    ON CONFLICT (thread_id) DO UPDATE SET holder = EXCLUDED.holder, expires = EXCLUDED.expires
    WHERE {leases}.expires < {now} OR {leases}.holder = EXCLUDED.holder
    RETURNING thread_id
), gone AS (
    DELETE FROM {waiters} WHERE seq = %(seq)s AND EXISTS (SELECT 1 FROM won) RETURNING seq
)
SELECT EXISTS (SELECT 1 FROM gone) AS won,
    (SELECT seq FROM first) AS first_seq, (SELECT holder FROM first) AS first_holder,
    (SELECT holder FROM {leases} WHERE thread_id = %(thread)s) AS lease_holder
"""


class ThreadLine:
    """The waiters' tickets of ``leases``, a thread lease table.

    Args:
        pool: A psycopg async pool (rows read as dicts), as ``shared_pool`` returns.
        leases: The thread lease table (``thread_id``, ``holder``, ``expires``).
    """

    def __init__(self, pool: Any, leases: str) -> None:
        self.pool = pool
        self.leases = leases

    def _sql(self, template: str) -> str:
        return template.format(waiters=WAITERS, leases=self.leases, now=_NOW)

    async def come(self, thread_id: str, holder: str, lease_s: float) -> int | None:
        """Take the thread if it is free and nobody waits for it (None); otherwise join its
        line: the ticket to try with."""
        values = {"thread": thread_id, "holder": holder, "lease_s": lease_s}
        async with self.pool.connection() as conn:
            cursor = await conn.execute(self._sql(_COME), values)
            row = await cursor.fetchone()
        return None if row is None else int(row["seq"])

    async def try_take(self, thread_id: str, holder: str, lease_s: float, seq: int) -> bool:
        """Take the thread if ticket ``seq`` is the first in line and the thread is free,
        leaving the line; otherwise keep the ticket fresh and clear the way of holders and
        waiters whose processes are gone (``holder_gone``)."""
        values = {"thread": thread_id, "holder": holder, "lease_s": lease_s, "seq": seq}
        async with self.pool.connection() as conn:
            cursor = await conn.execute(self._sql(_TRY), values)
            row = await cursor.fetchone()
            if row["won"]:
                return True
            await conn.execute(  # its place kept, even if its lapsed ticket was cleared
                f"INSERT INTO {WAITERS} VALUES (%s, %s, %s, {_NOW} + %s) "
                "ON CONFLICT (seq) DO UPDATE SET expires = EXCLUDED.expires",
                (seq, thread_id, holder, lease_s),
            )
            first = row["first_holder"]
            if row["first_seq"] is None:  # its ticket had lapsed: renewed above, try again
                return False
            if row["first_seq"] != seq and first is not None and holder_gone(first):
                await conn.execute(f"DELETE FROM {WAITERS} WHERE seq = %s", (row["first_seq"],))
            lease = row["lease_holder"]
            if lease is not None and lease != holder and holder_gone(lease):
                await conn.execute(
                    f"DELETE FROM {self.leases} WHERE thread_id = %s AND holder = %s",
                    (thread_id, lease),
                )
            return False

    async def leave(self, seq: int) -> None:
        """Give up ticket ``seq`` (its waiter was cancelled)."""
        async with self.pool.connection() as conn:
            await conn.execute(f"DELETE FROM {WAITERS} WHERE seq = %s", (seq,))
