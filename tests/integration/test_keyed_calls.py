"""A caller's idempotency key (a request to the tool server) runs a side effect once: calls
sent together with it take turns, a call another process is making is waited for, and the key
is bound to what it first asked (tool and arguments)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from agents.skills import once
from agents.skills.registry import SkillRegistry
from agents.skills.runner import ToolRunner
from agents.state.calls import Claim, MemoryCallJournal
from tests.skillkit import tool, write_skill

# Each run of the handler appends a line; a "fail" file makes the next run fail (and go), a
# "late" file fail after a while.
HANDLER = """
import json, time
from pathlib import Path

def pay(amount, context):
    data = Path(context.data_dir)
    with open(data / "runs.jsonl", "a") as out:
        out.write(json.dumps({"key": context.idempotency_key, "amount": amount}) + "\\n")
    if (data / "fail").exists():
        (data / "fail").unlink()
        raise RuntimeError("the bank said no")
    if (data / "late").exists():  # this run's bank answers late, and says no
        (data / "late").unlink()
        time.sleep(1.5)
        raise RuntimeError("the bank timed out")
    time.sleep(0.3)
    return {"paid": amount}

def refund(amount, context):
    return {"refunded": amount}
"""
AMOUNT = {"amount": {"type": "number"}}


@pytest.fixture(params=["process", "thread"])
async def runner(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[ToolRunner]:
    write_skill(
        tmp_path / "skills",
        "bank",
        config={
            "isolation": request.param,
            "tools": [
                tool("pay", "handler:pay", AMOUNT, ["amount"], side_effects=True),
                tool("refund", "handler:refund", AMOUNT, ["amount"], side_effects=True),
            ],
        },
        handler=HANDLER,
    )
    registry = SkillRegistry(tmp_path / "skills")
    registry.reload()
    runner = ToolRunner(registry, tmp_path / "data")
    yield runner
    await runner.aclose()


def runs(runner: ToolRunner) -> list[dict[str, object]]:
    path = runner.data_dir / "skills" / "bank" / "runs.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


async def test_calls_sent_together_with_one_key_run_the_handler_once(runner: ToolRunner) -> None:
    calls = [runner.call("pay", {"amount": 5}, idempotency_key="pay-1") for _ in range(3)]
    results = await asyncio.gather(*calls)
    assert [r.ok for r in results] == [True, True, True], results
    assert {r.content for r in results} == {results[0].content}
    assert runs(runner) == [{"key": "pay-1", "amount": 5}]


async def test_a_key_sent_with_another_call_is_refused_not_answered_with_the_first(
    runner: ToolRunner,
) -> None:
    first = await runner.call("pay", {"amount": 5}, idempotency_key="pay-2")
    assert first.ok, first
    other_amount = await runner.call("pay", {"amount": 99}, idempotency_key="pay-2")
    other_tool = await runner.call("refund", {"amount": 5}, idempotency_key="pay-2")
    for refused in (other_amount, other_tool):
        assert not refused.ok
        assert refused.error_code == "idempotency_key_reused"
        assert "new key" in refused.content
    assert len(runs(runner)) == 1
    again = await runner.call("pay", {"amount": 5}, idempotency_key="pay-2")
    assert (again.ok, again.content) == (True, first.content)  # the retry: its answer


async def test_a_failed_call_runs_again_at_once_when_retried(runner: ToolRunner) -> None:
    (runner.data_dir / "skills" / "bank").mkdir(parents=True, exist_ok=True)
    (runner.data_dir / "skills" / "bank" / "fail").write_text("once")
    failed = await runner.call("pay", {"amount": 7}, idempotency_key="pay-3")
    assert not failed.ok
    retried = await asyncio.wait_for(
        runner.call("pay", {"amount": 7}, idempotency_key="pay-3"), timeout=10
    )  # not held back as if the failed call were still running somewhere
    assert retried.ok, retried
    assert [r["key"] for r in runs(runner)] == ["pay-3", "pay-3"]  # the same key both times


async def test_a_call_another_process_is_making_is_waited_for_and_its_answer_given(
    runner: ToolRunner,
) -> None:
    journal = runner.journal
    await runner.call("pay", {"amount": 1}, idempotency_key="warm-up")  # the same request shape
    request = (await journal.get("warm-up")).request  # type: ignore[union-attr]
    assert request is not None
    assert request.startswith("pay:")
    other = '{"paid": 8, "by": "the other process"}'
    claim = await journal.begin("pay-4", thread_id=None, run_id=None, tool="pay", request=None)
    assert isinstance(claim, Claim)

    async def other_process_finishes() -> None:
        await asyncio.sleep(0.6)
        assert await journal.finish(claim, other, True)

    finishing = asyncio.create_task(other_process_finishes())
    result = await asyncio.wait_for(
        runner.call("pay", {"amount": 8}, idempotency_key="pay-4"), timeout=10
    )
    await finishing
    assert (result.ok, result.content) == (True, other)
    assert [r["key"] for r in runs(runner)] == ["warm-up"]  # not run here


async def test_a_side_effect_under_way_when_its_run_is_stopped_goes_on_to_its_end(
    runner: ToolRunner,
) -> None:
    # A cancelled run (the user pressed stop) must not cut a payment off half-way: the
    # call ends and is recorded, and the run's retry gets its answer without paying again.
    asked = {"thread_id": "t-1", "turn_id": "turn-1"}
    call = asyncio.create_task(runner.call("pay", {"amount": 3}, **asked))
    await asyncio.sleep(0.05)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    for _ in range(100):  # the call goes on in the background
        if runs(runner) and not runner.once._finishing:
            break
        await asyncio.sleep(0.1)
    assert len(runs(runner)) == 1
    again = await runner.call("pay", {"amount": 3}, **asked)
    assert (again.ok, again.data) == (True, {"paid": 3})
    assert len(runs(runner)) == 1  # replayed from the journal


async def test_retries_in_two_processes_after_a_failure_run_it_once_more_not_twice(
    runner: ToolRunner,
) -> None:
    other = ToolRunner(runner.registry, runner.data_dir)  # another process, the same journal
    other.journal = runner.journal
    (runner.data_dir / "skills" / "bank").mkdir(parents=True, exist_ok=True)
    (runner.data_dir / "skills" / "bank" / "fail").write_text("once")
    assert not (await runner.call("pay", {"amount": 4}, idempotency_key="pay-5")).ok
    try:
        retries = await asyncio.gather(
            runner.call("pay", {"amount": 4}, idempotency_key="pay-5"),
            other.call("pay", {"amount": 4}, idempotency_key="pay-5"),
        )
    finally:
        await other.aclose()
    assert [r.ok for r in retries] == [True, True], retries
    assert len(runs(runner)) == 2  # the failed run, and one retry: the other waited for it


async def test_a_run_resumed_in_another_process_waits_for_the_call_its_stop_left_going(
    runner: ToolRunner,
) -> None:
    # A run stopped mid-call: the call goes on where it was, and the run's resumption in
    # another process finds it under way (heard of): it waits for its answer.
    asked = {"thread_id": "t-2", "turn_id": "turn-2"}
    other = ToolRunner(runner.registry, runner.data_dir)
    other.journal = runner.journal
    try:
        first = asyncio.create_task(other.call("pay", {"amount": 6}, **asked))
        await asyncio.sleep(0.1)  # under way in "the other process"
        again = await asyncio.wait_for(runner.call("pay", {"amount": 6}, **asked), 15)
        made = await first
    finally:
        await other.aclose()
    assert (again.ok, again.data) == (True, {"paid": 6})
    assert made.ok
    assert len(runs(runner)) == 1


async def test_a_call_whose_process_went_silent_is_taken_over_at_once(
    runner: ToolRunner,
) -> None:
    journal = runner.journal
    await journal.begin("pay-6", thread_id=None, run_id=None, tool="pay", request=None)
    record = await journal.get("pay-6")
    assert record is not None
    silent = replace(record, created=record.created - 60, updated=record.updated - 60)
    journal.records["pay-6"] = silent  # type: ignore[attr-defined]  # its process died
    result = await asyncio.wait_for(
        runner.call("pay", {"amount": 9}, idempotency_key="pay-6"), timeout=5
    )
    assert (result.ok, result.data) == (True, {"paid": 9})
    assert len(runs(runner)) == 1


async def test_calls_sent_together_share_a_failure_and_a_later_retry_runs_again(
    runner: ToolRunner,
) -> None:
    # Each call that had waited for a failed one ran the handler again in turn: one
    # request sent three times was made three times.
    (runner.data_dir / "skills" / "bank").mkdir(parents=True, exist_ok=True)
    (runner.data_dir / "skills" / "bank" / "fail").write_text("once")
    calls = [runner.call("pay", {"amount": 2}, idempotency_key="pay-7") for _ in range(3)]
    failed = await asyncio.gather(*calls)
    assert [r.ok for r in failed] == [False, False, False], failed
    assert {r.content for r in failed} == {failed[0].content}
    assert "the bank said no" in failed[0].content
    assert {r.error_code for r in failed} == {"tool_failed"}
    assert len(runs(runner)) == 1
    retried = await runner.call("pay", {"amount": 2}, idempotency_key="pay-7")
    assert (retried.ok, retried.data) == (True, {"paid": 2})
    assert len(runs(runner)) == 2


async def test_a_run_resumed_with_other_arguments_takes_over_its_silent_call(
    runner: ToolRunner,
) -> None:
    # A workflow node's key names the run, node and visit, not the arguments: resumed after
    # its process died mid-call, its arguments may render otherwise. The call looped for
    # ever, neither allowed to take the record over nor waiting for anything.
    journal = runner.journal
    await journal.begin("wf-1", thread_id="t", run_id="r", tool="pay", request="pay:before")
    record = await journal.get("wf-1")
    assert record is not None
    silent = replace(record, created=record.created - 60, updated=record.updated - 60)
    journal.records["wf-1"] = silent  # type: ignore[attr-defined]
    result = await asyncio.wait_for(
        runner.call("pay", {"amount": 11}, thread_id="t", run_id="r", idempotency_key="wf-1"), 5
    )
    assert (result.ok, result.data) == (True, {"paid": 11})


async def test_a_calls_end_is_recorded_though_the_journal_fails_once(
    runner: ToolRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The side effect was done; an end not recorded let a retry make it again.
    journal = runner.journal
    finish = journal.finish
    failures = [RuntimeError("database restarting")]

    async def flaky(claim: Claim, content: str, ok: bool) -> bool:
        if failures:
            raise failures.pop()
        return await finish(claim, content, ok)

    monkeypatch.setattr(journal, "finish", flaky)
    made = await runner.call("pay", {"amount": 12}, idempotency_key="pay-8")
    assert made.ok, made
    record = await journal.get("pay-8")
    assert record is not None
    assert record.status == "done"


class LostBeats(MemoryCallJournal):
    """Another process's view of a journal its beats do not reach (its pool is saturated, or
    the database blinked): they fail, or get through only after a while."""

    def __init__(self, shared: MemoryCallJournal, stall_s: float | None) -> None:
        super().__init__()
        self.records = shared.records
        self.stall_s = stall_s

    async def touch(self, claim: Claim) -> bool:
        if self.stall_s is None:
            raise TimeoutError("couldn't get a connection after 30.00 sec")
        await asyncio.sleep(self.stall_s)
        return await super().touch(claim)


@pytest.mark.parametrize("beats", ["fail", "stall"])
async def test_a_call_taken_over_after_its_beats_were_lost_does_not_undo_the_one_that_took_it(
    runner: ToolRunner, monkeypatch: pytest.MonkeyPatch, beats: str
) -> None:
    # The first process's beats were lost while its handler ran, so a retry in another
    # process took the call over (as if the first had died) and paid. The first's late
    # failure then marked the call failed over the second's record: a third retry paid again.
    monkeypatch.setattr(once, "_BEAT_S", 0.1)
    monkeypatch.setattr(once, "_SILENT_S", 0.4)
    monkeypatch.setattr(once, "_SETTLE_POLL_S", 0.05)
    shared = runner.journal
    assert isinstance(shared, MemoryCallJournal)
    first_process = ToolRunner(runner.registry, runner.data_dir)
    first_process.journal = LostBeats(shared, None if beats == "fail" else 0.6)
    (runner.data_dir / "skills" / "bank").mkdir(parents=True, exist_ok=True)
    (runner.data_dir / "skills" / "bank" / "late").write_text("once")
    try:
        with capture_logs() as logs:
            first = asyncio.create_task(
                first_process.call("pay", {"amount": 13}, idempotency_key="pay-9")
            )
            for _ in range(100):  # its handler under way
                if runs(runner):
                    break
                await asyncio.sleep(0.05)
            second = await asyncio.wait_for(
                runner.call("pay", {"amount": 13}, idempotency_key="pay-9"), 10
            )
            late = await asyncio.wait_for(first, 10)
    finally:
        await first_process.aclose()
    assert (second.ok, second.data) == (True, {"paid": 13})
    assert not late.ok  # the first caller gets its own answer
    assert "the bank timed out" in late.content
    record = await shared.get("pay-9")
    assert record is not None
    assert (record.status, record.content) == ("done", second.content)
    third = await runner.call("pay", {"amount": 13}, idempotency_key="pay-9")
    assert (third.ok, third.content) == (True, second.content)  # replayed, not paid again
    assert len(runs(runner)) == 2
    events = {(e["event"], e.get("key")) for e in logs if e["log_level"] == "error"}
    assert ("tool.journal_lost_claim", "pay-9") in events
    if beats == "stall":  # its beat, late, found the call taken over
        assert ("tool.journal_claim_taken_over", "pay-9") in events
