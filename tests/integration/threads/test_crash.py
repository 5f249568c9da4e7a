"""A conversation whose service process is killed mid-run: after a restart the thread is
whole, and resuming it finishes the run from its last checkpoint, the steps that finished
not run again and the side effect not repeated."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fakellm import FakeLLM, Reply, ToolCall
from tests.integration.test_server_process import Service

ROOT = Path(__file__).parents[3]
ORDER = {
    "device_id": "PUMP-07",
    "title": "Replace bearing",
    "description": "Bearing wear on pump 7, vibration high.",
    "priority": "high",
}


CALL = Reply(tool_calls=[ToolCall("create_work_order", ORDER)])


def bundled_env(tmp_path: Path, store_url: str, service_env: dict[str, str]) -> dict[str, str]:
    """A service with the bundled skills, no workflows, on ``store_url``."""
    return {
        **service_env,
        "SKILLDESK_SKILLS_DIR": str(ROOT / "skills"),
        "SKILLDESK_WORKFLOWS_DIR": str(tmp_path / "no-workflows"),
        "SKILLDESK_SKILLS_EMBEDDINGS": "false",
        "SKILLDESK_CHECKPOINT_URL": store_url,
    }


def crash_after_the_tool(
    fake_llm: FakeLLM, tmp_path: Path, store_url: str, service_env: dict[str, str], thread: str
) -> tuple[dict[str, str], Path]:
    """A service killed (-9) right after its work order is made, in a run of ``thread``;
    the environment and data folder to restart it with."""
    env = bundled_env(tmp_path, store_url, service_env)
    data = tmp_path / "data"
    fake_llm.script(CALL)  # the model asks for the work order; it is made, then the kill
    crashing = Service({**env, "SKILLDESK_FAILPOINTS": "tool.done=create_work_order"}, data)
    with pytest.raises(httpx.HTTPError):
        httpx.post(
            f"{crashing.url}/v1/threads/{thread}/runs/stream",
            json={"message": "Open a work order for pump 7's bearing.", "skill": "work-order"},
            timeout=60,
        )
    crashing.proc.wait(timeout=20)
    assert crashing.proc.returncode == -9
    return env, data


def orders_of(url: str) -> list[Any]:
    """The work orders of PUMP-07, listed through the skill's own tool."""
    listed = httpx.post(
        f"{url}/v1/skills/work-order/tools/list_work_orders",
        json={"arguments": {"device_id": "PUMP-07"}},
        timeout=30,
    ).json()
    return _orders(listed["result"])


def test_a_run_killed_after_its_tool_resumes_to_the_end_with_one_side_effect(
    fake_llm: FakeLLM, tmp_path: Path, store_url: str, service_env: dict[str, str]
) -> None:
    env, data = crash_after_the_tool(fake_llm, tmp_path, store_url, service_env, "pump")

    # Restarted, the service resumes the run itself; the model is down at first (the first
    # try and two retries fail), so that run fails and the thread says so; resumed by hand
    # once the model answers, the expert step runs again: the reply that asked for the call
    # was recorded before it ran, so it is acted on again (the journal answers the call)
    # and the model is asked only for the answer.
    fake_llm.script(*[Reply(status=500)] * 3, Reply(content="Work order opened for PUMP-07."))
    restarted = Service(env, data)
    try:
        _wait_for_status(restarted.url, "pump", "failed")
        kept = httpx.get(f"{restarted.url}/v1/threads/pump").json()["messages"]
        assert [m["role"] for m in kept] == ["human"]  # the user's message, kept
        resumed = httpx.post(f"{restarted.url}/v1/threads/pump/resume", timeout=60)
        assert resumed.status_code == 200, resumed.text
        events = [block.split("\n", 1)[0][7:] for block in resumed.text.strip().split("\n\n")]
        again = httpx.post(f"{restarted.url}/v1/threads/pump/resume", timeout=60)
        after = httpx.get(f"{restarted.url}/v1/threads/pump").json()
        history = httpx.get(f"{restarted.url}/v1/threads/pump/history").json()["data"]
        orders = orders_of(restarted.url)
    finally:
        restarted.stop()
    assert "route_decided" not in events  # routing finished before the kill: not run again
    assert [h["node"] for h in history].count("route") == 1
    assert events[-1] == "run_finished"
    assert again.status_code == 409
    assert [m["role"] for m in after["messages"]] == ["human", "ai", "tool", "ai"]
    assert after["messages"][-1]["content"] == "Work order opened for PUMP-07."
    assert len(orders) == 1  # made once, crash or not


def test_a_restarted_service_finishes_the_run_a_killed_one_left_by_itself(
    fake_llm: FakeLLM, tmp_path: Path, store_url: str, service_env: dict[str, str]
) -> None:
    env, data = crash_after_the_tool(fake_llm, tmp_path, store_url, service_env, "auto")
    fake_llm.script(Reply(content="Work order opened for PUMP-07."))  # the call: recorded
    restarted = Service(env, data)
    try:
        record = _wait_for_status(restarted.url, "auto", "idle")
        after = httpx.get(f"{restarted.url}/v1/threads/auto").json()
        orders = orders_of(restarted.url)
    finally:
        restarted.stop()
    assert record["messages"] == 4
    assert after["messages"][-1]["content"] == "Work order opened for PUMP-07."
    assert len(orders) == 1
    assert any(line.get("event") == "thread.resuming_orphan" for line in restarted.logs())


def _wait_for_status(url: str, thread: str, status: str) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while True:
        listed = httpx.get(f"{url}/v1/threads", timeout=10).json()["data"]
        record = next((t for t in listed if t["thread_id"] == thread), {})
        if record.get("status") == status or time.monotonic() > deadline:
            assert record.get("status") == status, record
            return record
        time.sleep(0.2)


def _orders(result: Any) -> list[Any]:
    if isinstance(result, dict):
        for value in result.values():
            if isinstance(value, list):
                return value
    return list(result) if isinstance(result, list) else json.loads(result)


def test_a_run_resumed_after_a_crash_keeps_the_id_its_client_polls(
    fake_llm: FakeLLM, tmp_path: Path, store_url: str, service_env: dict[str, str]
) -> None:
    # QA: without Redis the resumed run got a new id; the client's run id was a 404.
    env = bundled_env(tmp_path, store_url, service_env)
    data = tmp_path / "data"
    fake_llm.script(CALL)
    crashing = Service({**env, "SKILLDESK_FAILPOINTS": "tool.done=create_work_order"}, data)
    started = httpx.post(
        f"{crashing.url}/v1/threads/polled/runs",
        json={"message": "Open a work order for pump 7's bearing.", "skill": "work-order"},
        timeout=60,
    )
    assert started.status_code == 202, started.text
    run_id = started.json()["id"]
    crashing.proc.wait(timeout=20)
    assert crashing.proc.returncode == -9
    fake_llm.script(Reply(content="Work order opened for PUMP-07."))
    restarted = Service(env, data)
    try:
        _wait_for_status(restarted.url, "polled", "idle")
        run = httpx.get(f"{restarted.url}/v1/threads/polled/runs/{run_id}", timeout=10)
        messages = httpx.get(f"{restarted.url}/v1/threads/polled").json()["messages"]
    finally:
        restarted.stop()
    assert run.status_code == 200, run.text
    assert run.json()["status"] == "succeeded"
    assert messages[-1]["content"] == "Work order opened for PUMP-07."
    assert messages[-1]["run_id"] == run_id


def test_a_message_queued_behind_a_run_is_answered_after_a_crash_in_its_turn(
    fake_llm: FakeLLM, tmp_path: Path, store_url: str, service_env: dict[str, str]
) -> None:
    # QA: without Redis a message accepted with 202 (queued) vanished with its process.
    env = {**service_env, "SKILLDESK_CHECKPOINT_URL": store_url}
    data = tmp_path / "data"
    fake_llm.script(Reply(content="never sent", delay=60))  # the call the kill cuts off
    crashing = Service(env, data)
    first = httpx.post(f"{crashing.url}/v1/threads/q2/runs", json={"message": "first"}, timeout=30)
    assert first.status_code == 202, first.text
    deadline = time.monotonic() + 20
    while not fake_llm.scripted_requests and time.monotonic() < deadline:
        time.sleep(0.05)  # the first run is at its model call
    second = httpx.post(
        f"{crashing.url}/v1/threads/q2/runs", json={"message": "second"}, timeout=30
    )
    assert second.status_code == 202, second.text
    assert second.json()["status"] == "queued"
    time.sleep(0.5)  # kept in the store once it waits
    crashing.proc.kill()
    crashing.proc.wait(timeout=20)
    fake_llm.script(Reply(content="Answer one.", delay=3), Reply(content="Answer two."))
    restarted = Service(env, data)
    try:
        # Known at once, queued behind the first run resumed (QA: a 404 until that ended,
        # and a cancel could not reach it).
        waiting = httpx.get(f"{restarted.url}/v1/threads/q2/runs/{second.json()['id']}")
        assert waiting.status_code == 200, waiting.text
        assert waiting.json()["status"] == "queued"
        assert waiting.json()["created"] == second.json()["created"]  # when it was accepted
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            messages = httpx.get(f"{restarted.url}/v1/threads/q2").json()["messages"]
            if len(messages) >= 4:
                break
            time.sleep(0.2)
        run = httpx.get(f"{restarted.url}/v1/threads/q2/runs/{second.json()['id']}", timeout=10)
    finally:
        restarted.stop()
    assert [m["content"] for m in messages] == ["first", "Answer one.", "second", "Answer two."]
    assert run.status_code == 200, run.text
    assert run.json()["status"] == "succeeded"
    assert any(line.get("event") == "run.queued_taken_up" for line in restarted.logs())


def _queued_behind_a_slow_first(
    crashing: Service, fake_llm: FakeLLM, thread: str, second: dict[str, Any]
) -> None:
    """A first message whose answer takes a while, then ``second`` queued behind it."""
    first = httpx.post(
        f"{crashing.url}/v1/threads/{thread}/runs", json={"message": "first"}, timeout=30
    )
    assert first.status_code == 202, first.text
    deadline = time.monotonic() + 20
    while not fake_llm.scripted_requests and time.monotonic() < deadline:
        time.sleep(0.05)  # the first run is at its model call
    queued = httpx.post(f"{crashing.url}/v1/threads/{thread}/runs", json=second, timeout=30)
    assert queued.json()["status"] == "queued", queued.text
    crashing.proc.wait(timeout=30)  # the second run begins, and the failpoint kills it
    assert crashing.proc.returncode == -9


def _messages_once_there(url: str, thread: str, count: int) -> list[dict[str, Any]]:
    """The thread's messages once there are ``count`` and the last run's trace is kept (its
    answer shows its ``run_id``: on a busy machine, a while after the answer is stored)."""
    deadline = time.monotonic() + 30
    while True:
        messages = httpx.get(f"{url}/v1/threads/{thread}").json()["messages"]
        settled = len(messages) >= count and "run_id" in messages[-1]
        if settled or time.monotonic() > deadline:
            return list(messages)
        time.sleep(0.2)


def test_a_queued_run_killed_as_it_began_before_its_turn_was_stored_is_answered_at_restart(
    fake_llm: FakeLLM, tmp_path: Path, store_url: str, service_env: dict[str, str]
) -> None:
    # Left yesterday: the kept run was forgotten as it took its thread, before its message
    # was stored; a crash in between lost the message that had been accepted with 202.
    env = {**service_env, "SKILLDESK_CHECKPOINT_URL": store_url}
    data = tmp_path / "data"
    fake_llm.script(Reply(content="Answer one.", delay=1.0))
    crashing = Service({**env, "SKILLDESK_FAILPOINTS": "turn.opened=second"}, data)
    _queued_behind_a_slow_first(crashing, fake_llm, "q3", {"message": "second"})
    fake_llm.script(Reply(content="Answer two."))
    restarted = Service(env, data)
    try:
        messages = _messages_once_there(restarted.url, "q3", 4)
        time.sleep(0.5)  # nothing more comes
        again = httpx.get(f"{restarted.url}/v1/threads/q3").json()["messages"]
    finally:
        restarted.stop()
    assert [m["content"] for m in messages] == ["first", "Answer one.", "second", "Answer two."]
    assert again == messages


def test_a_queued_run_killed_after_its_turn_was_stored_is_resumed_not_run_again(
    fake_llm: FakeLLM, tmp_path: Path, store_url: str, service_env: dict[str, str]
) -> None:
    # Kept until it ends, such a run is both cut off (resumed from its checkpoint) and kept:
    # its next start resumes it and does not run it a second time.
    env = bundled_env(tmp_path, store_url, service_env)
    data = tmp_path / "data"
    fake_llm.script(Reply(content="Answer one.", delay=1.0), CALL)
    crashing = Service({**env, "SKILLDESK_FAILPOINTS": "tool.done=create_work_order"}, data)
    ask = {"message": "Open a work order for pump 7's bearing.", "skill": "work-order"}
    _queued_behind_a_slow_first(crashing, fake_llm, "q4", ask)
    fake_llm.script(Reply(content="Work order opened for PUMP-07."))
    restarted = Service(env, data)
    try:
        messages = _messages_once_there(restarted.url, "q4", 6)
        _wait_for_status(restarted.url, "q4", "idle")
        time.sleep(0.5)  # nothing more comes
        again = httpx.get(f"{restarted.url}/v1/threads/q4").json()["messages"]
        orders = orders_of(restarted.url)
    finally:
        restarted.stop()
    assert [m["role"] for m in messages] == ["human", "ai", "human", "ai", "tool", "ai"]
    assert messages[-1]["content"] == "Work order opened for PUMP-07."
    assert again == messages
    assert len(orders) == 1
    assert any(line.get("event") == "run.queued_had_begun" for line in restarted.logs())
