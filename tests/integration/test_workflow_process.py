"""Workflows in a real service process: an approval waits across a restart and resumes
(approve and reject); a process killed at each node of the maintenance procedure, restarted on
the same data, finishes the run with one work order."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.bundledkit import work_orders
from tests.fakellm import FakeLLM, Reply
from tests.integration.test_server_process import Service

ROOT = Path(__file__).parents[2]
# Every node of the maintenance procedure before its approval gate.
MAINTENANCE = ["alarms", "readings", "knowledge", "diagnosis", "work_order"]


@pytest.fixture
def env(fake_llm: FakeLLM) -> dict[str, str]:
    values = {k: v for k, v in os.environ.items() if not k.startswith("SKILLDESK_")}
    values.update(
        SKILLDESK_SKILLS_DIR=str(ROOT / "skills"),
        SKILLDESK_WORKFLOWS_DIR=str(ROOT / "workflows"),
        SKILLDESK_SKILLS_EMBEDDINGS="false",
        SKILLDESK_MODEL="openai/fake-model",
        SKILLDESK_MODEL_API_BASE=fake_llm.base_url,
        SKILLDESK_MODEL_API_KEY="sk-test",
        SKILLDESK_LOG_FORMAT="json",
    )
    return values


def start_run(service: Service, name: str, **inputs: Any) -> dict[str, Any]:
    response = httpx.post(
        f"{service.url}/v1/workflows/{name}/runs", json={"inputs": inputs}, timeout=60
    )
    assert response.status_code == 200, response.text
    return dict(response.json())


@pytest.mark.parametrize(("decision", "says"), [("approve", "is approved"), ("reject", "refused")])
def test_an_approval_waits_across_a_restart_and_the_decision_resumes_the_run(
    env: dict[str, str], tmp_path: Path, decision: str, says: str
) -> None:
    first = Service(env, tmp_path / "data")
    try:
        record = start_run(first, "refund-request", order_id="ORD1002")
    finally:
        first.stop()
    assert record["status"] == "WAITING"
    second = Service(env, tmp_path / "data")
    try:
        inbox = httpx.get(f"{second.url}/v1/approvals").json()["approvals"]
        assert [a["run_id"] for a in inbox] == [record["id"]]
        decided = httpx.post(
            f"{second.url}/v1/approvals/{inbox[0]['approval_id']}",
            json={"decision": decision, "comment": "checked"},
            timeout=60,
        ).json()
    finally:
        second.stop()
    assert decided["status"] == "SUCCEEDED", decided
    assert says in decided["outputs"]["message"]
    # Nodes that ran before the restart did not run again.
    assert decided["nodes"]["order"]["visits"] == 1


@pytest.mark.parametrize("node", MAINTENANCE)
def test_killed_after_each_node_the_maintenance_run_finishes_with_one_work_order(
    env: dict[str, str], fake_llm: FakeLLM, tmp_path: Path, node: str
) -> None:
    # The model diagnoses once; twice only when the kill came after the diagnosis and before
    # its checkpoint (finished nodes are not run again).
    calls = 2 if node == "diagnosis" else 1
    fake_llm.script(*[Reply(content="Bearing wear; check vibration first.")] * calls)
    data = tmp_path / "data"
    crashing = Service({**env, "SKILLDESK_FAILPOINTS": f"workflow.node_done={node}"}, data)
    with pytest.raises(httpx.HTTPError):
        start_run(crashing, "equipment-maintenance", device_id="PUMP-07")
    crashing.proc.wait(timeout=20)
    assert crashing.proc.returncode == -9  # killed at the failpoint
    restarted = Service(env, data)  # resumes the run it finds RUNNING
    try:
        deadline = time.monotonic() + 30
        while True:
            runs = httpx.get(f"{restarted.url}/v1/workflow-runs").json()["runs"]
            if (runs and runs[0]["status"] != "RUNNING") or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        [run] = runs
        assert run["status"] == "WAITING", (run["error"], run["nodes"])
        orders = httpx.post(
            f"{restarted.url}/v1/skills/work-order/tools/list_work_orders",
            json={"arguments": {"device_id": "PUMP-07"}},
            timeout=30,
        ).json()
    finally:
        restarted.stop()
    ids = [o["work_order_id"] for o in work_orders(orders["result"])]
    assert ids == [run["waiting"]["data"]["work_order"]]  # one work order, the run's own
    # The record has every node, those before the kill too, each run once.
    ran = run["nodes"]
    assert [n for n in MAINTENANCE if n in ran] == MAINTENANCE
    assert all(ran[n]["visits"] == 1 for n in MAINTENANCE if n != node)
