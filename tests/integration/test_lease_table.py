"""The lease rows that thread and workflow run leases share, on a real PostgreSQL: one
claimant wins, an expired lease is anyone's, only its holder lets it go."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest

from agents import cancelling
from agents.state.checkpointers import open_checkpointer
from agents.state.lease_table import LeaseTable, new_holder, set_live, shared_pool
from agents.state.leases import LEASES, SWEPT_AFTER_S, thread_lock
from agents.state.thread_line import WAITERS
from app.services import open_services
from tests.pgkit import schema_url

# Holders of another machine: their pids say nothing here, only their leases' expiry counts.
A, B = "elsewhere:1:aaaa", "elsewhere:2:bbbb"


@pytest.fixture
async def leases() -> AsyncIterator[LeaseTable]:
    with schema_url("lease_table") as url:
        async with open_checkpointer(url) as saver:
            table = LeaseTable(shared_pool(saver), "test_leases", "name")
            await table.create()
            yield table


async def test_of_several_claimants_at_once_exactly_one_wins(leases: LeaseTable) -> None:
    holders = [f"elsewhere:{n}:cafe" for n in range(1, 11)]
    won = await asyncio.gather(*[leases.claim("k", h, 30) for h in holders])
    assert won.count(True) == 1
    winner = holders[won.index(True)]
    assert await leases.claim("k", winner, 30)  # its own lease, claimed again
    assert await leases.alive(["k", "other"]) == {"k"}


async def test_an_expired_lease_is_claimed_and_its_former_holder_keeps_nothing(
    leases: LeaseTable,
) -> None:
    assert await leases.claim("k", A, 0.2)
    assert not await leases.claim("k", B, 30)
    await asyncio.sleep(0.4)
    assert await leases.alive(["k"]) == set()
    assert await leases.claim("k", B, 30)
    assert await leases.renew(["k"], A, 30) == set()  # A finds it lost
    assert await leases.renew(["k"], B, 30) == {"k"}


async def test_a_release_by_another_holder_changes_nothing(leases: LeaseTable) -> None:
    assert await leases.claim("k", A, 30)
    await leases.release("k", B)
    assert await leases.alive(["k"]) == {"k"}
    assert not await leases.claim("k", B, 30)
    await leases.release("k", A)
    assert await leases.claim("k", B, 30)


async def test_a_lease_of_a_holder_here_that_is_no_longer_live_is_free_at_once(
    leases: LeaseTable,
) -> None:
    holder = new_holder()
    set_live(holder, True)
    assert await leases.claim("k", holder, 30)
    assert not await leases.claim("k", B, 30)
    set_live(holder, False)  # as a run that ended without deleting its lease
    assert await leases.alive(["k"]) == set()
    assert await leases.claim("k", B, 30)


async def _waiter(saver: Any, thread: str, holder: str, expires_in: float) -> None:
    """A ticket in the thread's line, as a waiter of ``holder`` leaves it."""
    async with saver.conn.connection() as conn:
        await conn.execute(
            f"INSERT INTO {WAITERS} (thread_id, holder, expires) "
            "VALUES (%s, %s, extract(epoch from clock_timestamp()) + %s)",
            (thread, holder, expires_in),
        )


async def test_a_thread_is_taken_in_line_but_not_behind_waiters_that_are_gone() -> None:
    with schema_url("thread_line") as url:
        async with open_checkpointer(url) as saver:
            await _waiter(saver, "t", A, 30)  # a live waiter of another machine
            with pytest.raises(TimeoutError):  # it came first: it goes first
                await asyncio.wait_for(_take(saver, "t"), 1.0)
            async with saver.conn.connection() as conn:
                await conn.execute(f"DELETE FROM {WAITERS}")
            await _waiter(saver, "t", A, -1)  # its ticket lapsed: its process died elsewhere
            await _waiter(saver, "t", f"{socket.gethostname()}:999999999:dead", 30)  # gone here
            await asyncio.wait_for(_take(saver, "t"), 5)
            async with thread_lock(saver, "u"):
                with pytest.raises(TimeoutError):  # a waiter cancelled leaves the line at once
                    await asyncio.wait_for(_take(saver, "u"), 0.5)
                assert await _tickets(saver, "u") == 0
            await asyncio.wait_for(_take(saver, "u"), 5)
            # The lapsed one skipped (cleared once long lapsed), the gone one taken out.
            assert await _tickets(saver, "t") == 1


async def _tickets(saver: Any, thread: str) -> int:
    async with saver.conn.connection() as conn:
        cursor = await conn.execute(
            f"SELECT count(*) AS n FROM {WAITERS} WHERE thread_id = %s", (thread,)
        )
        return int((await cursor.fetchone())["n"])


async def _take(saver: Any, thread: str) -> None:
    async with thread_lock(saver, thread):
        pass


async def test_leases_and_tickets_dead_processes_left_long_ago_are_cleared_by_retention(
    make_settings: Any,
) -> None:
    # A thread nobody comes to again (or deleted) kept a killed process's rows for good.
    with schema_url("lease_sweep") as url:
        async with open_services(make_settings(checkpoint_url=url), background=False) as services:
            saver = services.threads.saver
            await _waiter(saver, "gone", A, -SWEPT_AFTER_S - 5)  # lapsed long ago
            await _waiter(saver, "waits", B, 30)  # live: kept
            await _waiter(saver, "late", B, -40)  # lapsed lately: passed over, not cleared
            async with saver.conn.connection() as conn:
                for thread, expires_in in (("gone", -SWEPT_AFTER_S - 5), ("held", -40)):
                    await conn.execute(
                        f"INSERT INTO {LEASES} VALUES (%s, %s, "
                        "extract(epoch from clock_timestamp()) + %s)",
                        (thread, A, expires_in),
                    )
            report = await services.threads.prune()
            assert report.leases_swept == 2
            assert [await _tickets(saver, t) for t in ("gone", "waits", "late")] == [0, 1, 1]
            async with saver.conn.connection() as conn:
                cursor = await conn.execute(f"SELECT thread_id FROM {LEASES}")
                assert [r["thread_id"] for r in await cursor.fetchall()] == ["held"]


async def test_letting_a_thread_go_ends_its_renewal_even_when_a_cancel_is_lost(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Python 3.11's asyncio.wait_for (psycopg's pool waits for a connection with it) returns
    # its result and drops a cancel that lands as the result comes: the renewing loop went on
    # for good, and the run holding the thread never let it go (the load benchmark hung with
    # two threads held, their answers written, their next messages waiting in line). The
    # renewal ends because its holder let go: no second cancel comes to rescue it here.
    monkeypatch.setattr(cancelling, "AGAIN_S", 60.0)
    with schema_url("lost_cancel") as url:
        async with open_checkpointer(url) as saver:
            renewing = _slowed(monkeypatch, "renew", losing_a_cancel=True)

            async def hold_until_renewing() -> None:
                async with thread_lock(saver, "t", lease_s=0.3):
                    await renewing.wait()

            await asyncio.wait_for(hold_until_renewing(), 5)
            await asyncio.wait_for(_take(saver, "t"), 2)  # let go: anyone's at once


async def test_a_thread_is_let_go_even_when_its_holder_is_cancelled_again_as_it_lets_go(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A stop cancels a holder, then cancels it again while it lets go: the lease was left
    # held until it expired (30 s) when the second cancel cut its release.
    with schema_url("let_go") as url:
        async with open_checkpointer(url) as saver:
            releasing = _slowed(monkeypatch, "release")
            held = asyncio.Event()

            async def holder() -> None:
                async with thread_lock(saver, "t"):
                    held.set()
                    await asyncio.sleep(30)

            task = asyncio.create_task(holder())
            await asyncio.wait_for(held.wait(), 5)
            task.cancel()
            await asyncio.wait_for(releasing.wait(), 5)
            task.cancel()  # again, as it lets go
            await asyncio.gather(task, return_exceptions=True)
            await asyncio.sleep(0.4)
            async with saver.conn.connection() as conn:
                cursor = await conn.execute(f"SELECT count(*) AS n FROM {LEASES}")
                assert (await cursor.fetchone())["n"] == 0


def _slowed(
    monkeypatch: pytest.MonkeyPatch, method: str, *, losing_a_cancel: bool = False
) -> asyncio.Event:
    """``LeaseTable.<method>`` made to wait 0.2 s before its work (dropping a cancel that
    comes meanwhile when ``losing_a_cancel``, as Python 3.11's ``wait_for`` may); the event
    is set once it is called."""
    called = asyncio.Event()
    real = getattr(LeaseTable, method)

    async def slowed(self: LeaseTable, *args: Any) -> Any:
        called.set()
        if losing_a_cancel:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(0.2)
        else:
            await asyncio.sleep(0.2)
        return await real(self, *args)

    monkeypatch.setattr(LeaseTable, method, slowed)
    return called


async def _lease_row(saver: Any, thread: str) -> Any:
    async with saver.conn.connection() as conn:
        cursor = await conn.execute(f"SELECT holder FROM {LEASES} WHERE thread_id = %s", (thread,))
        return await cursor.fetchone()


async def _run_holding(saver: Any, thread: str) -> tuple[asyncio.Task[None], list[bool]]:
    """A run holding ``thread`` (a lease of 0.3 s) until cancelled, and what its ``lost``
    was told."""
    lost: list[bool] = []
    held = asyncio.Event()

    async def holder() -> None:
        async with thread_lock(saver, thread, lease_s=0.3, lost=lambda: lost.append(True)):
            held.set()
            await asyncio.sleep(30)

    task = asyncio.create_task(holder())
    await asyncio.wait_for(held.wait(), 5)
    return task, lost


async def test_a_lease_that_lapsed_while_still_its_holders_renews_and_one_gone_is_lost() -> None:
    # Renewals that failed a whole lease (the database out of reach) left it expired: still
    # the holder's, it renews; its row gone (another process took it, answered and let go),
    # the run is told and stopped, never taking it back over the other's turn (review).
    with schema_url("lease_back") as url:
        async with open_checkpointer(url) as saver:
            task, lost = await _run_holding(saver, "t")
            mine = (await _lease_row(saver, "t"))["holder"]
            async with saver.conn.connection() as conn:
                await conn.execute(
                    f"UPDATE {LEASES} SET expires = extract(epoch from clock_timestamp()) - 1"
                )
            await asyncio.sleep(0.3)  # a renewal's beat (a third of the lease) and more
            assert not lost
            assert not task.done()
            assert (await _lease_row(saver, "t"))["holder"] == mine
            async with saver.conn.connection() as conn:
                await conn.execute(f"DELETE FROM {LEASES} WHERE thread_id = 't'")
            with pytest.raises(asyncio.CancelledError):
                await asyncio.wait_for(task, 5)
            assert lost == [True]
            assert await _lease_row(saver, "t") is None  # not taken back


async def test_a_change_outside_a_run_that_loses_its_lease_goes_on_to_its_end() -> None:
    # A delete or a prune (no ``lost`` to tell) was cancelled mid-way, retention's loop with
    # it for good (review): only a run is stopped.
    with schema_url("lease_change") as url:
        async with open_checkpointer(url) as saver:
            async with thread_lock(saver, "t", lease_s=0.3):
                async with saver.conn.connection() as conn:
                    await conn.execute(f"UPDATE {LEASES} SET holder = %s", (A,))
                await asyncio.sleep(0.3)  # a beat finds the lease another's
            assert (await _lease_row(saver, "t"))["holder"] == A


async def test_a_holder_whose_thread_another_process_took_over_is_told_and_stopped() -> None:
    with schema_url("lease_lost") as url:
        async with open_checkpointer(url) as saver:
            task, lost = await _run_holding(saver, "t")
            async with saver.conn.connection() as conn:  # its lease lapsed, and A took it
                await conn.execute(
                    f"UPDATE {LEASES} SET holder = %s, "
                    "expires = extract(epoch from clock_timestamp()) + 60",
                    (A,),
                )
            with pytest.raises(asyncio.CancelledError):
                await asyncio.wait_for(task, 5)
            assert lost == [True]
            assert (await _lease_row(saver, "t"))["holder"] == A  # A's lease left as it is
