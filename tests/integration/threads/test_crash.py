"""A conversation whose service process is killed mid-run: after a restart the thread is
whole, and resuming it finishes the run from its last checkpoint, the steps that finished
not run again and the side effect not repeated."""

from __future__ import annotations

import json
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


def test_a_run_killed_after_its_tool_resumes_to_the_end_with_one_side_effect(
    fake_llm: FakeLLM, tmp_path: Path, store_url: str, service_env: dict[str, str]
) -> None:
    env = {
        **service_env,
        "SKILLDESK_SKILLS_DIR": str(ROOT / "skills"),
        "SKILLDESK_WORKFLOWS_DIR": str(tmp_path / "no-workflows"),
        "SKILLDESK_SKILLS_EMBEDDINGS": "false",
        "SKILLDESK_CHECKPOINT_URL": store_url,
    }
    data = tmp_path / "data"
    call = Reply(tool_calls=[ToolCall("create_work_order", ORDER)])
    # The crashed run: the model asks for the work order; the order is made, then the kill.
    fake_llm.script(call)
    crashing = Service({**env, "SKILLDESK_FAILPOINTS": "tool.done=create_work_order"}, data)
    with pytest.raises(httpx.HTTPError):
        httpx.post(
            f"{crashing.url}/v1/threads/pump/runs/stream",
            json={"message": "Open a work order for pump 7's bearing.", "skill": "work-order"},
            timeout=60,
        )
    crashing.proc.wait(timeout=20)
    assert crashing.proc.returncode == -9

    # The resumed expert step: the model asks again (same call), then answers.
    fake_llm.script(call, Reply(content="Work order opened for PUMP-07."))
    restarted = Service(env, data)
    try:
        before = httpx.get(f"{restarted.url}/v1/threads/pump").json()
        assert [m["role"] for m in before["messages"]] == ["human"]
        resumed = httpx.post(f"{restarted.url}/v1/threads/pump/resume", timeout=60)
        assert resumed.status_code == 200, resumed.text
        events = [block.split("\n", 1)[0][7:] for block in resumed.text.strip().split("\n\n")]
        again = httpx.post(f"{restarted.url}/v1/threads/pump/resume", timeout=60)
        after = httpx.get(f"{restarted.url}/v1/threads/pump").json()
        orders = httpx.post(
            f"{restarted.url}/v1/skills/work-order/tools/list_work_orders",
            json={"arguments": {"device_id": "PUMP-07"}},
            timeout=30,
        ).json()
    finally:
        restarted.stop()
    assert "route_decided" not in events  # routing finished before the kill: not run again
    assert events[-1] == "run_finished"
    assert again.status_code == 409
    assert [m["role"] for m in after["messages"]] == ["human", "ai", "tool", "ai"]
    assert after["messages"][-1]["content"] == "Work order opened for PUMP-07."
    assert len(_orders(orders["result"])) == 1  # made once, crash or not


def _orders(result: Any) -> list[Any]:
    if isinstance(result, dict):
        for value in result.values():
            if isinstance(value, list):
                return value
    return list(result) if isinstance(result, list) else json.loads(result)
