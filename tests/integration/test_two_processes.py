"""Two service processes on one PostgreSQL database and one data folder, as behind a load
balancer: a conversation alternates between them, a workflow started on one is approved
through the other, a file uploaded to one is served by the other, a thread deleted on one is
gone on both."""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from tests.fakellm import FakeLLM, Reply, ToolCall
from tests.integration.test_server_process import Service

ROOT = Path(__file__).resolve().parents[2]
POSTGRES = "postgresql://postgres@127.0.0.1:5432/test"


@pytest.fixture
def pair(fake_llm: FakeLLM, tmp_path: Path) -> Iterator[tuple[Service, Service]]:
    schema = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(POSTGRES, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKILLDESK_")}
    env.update(
        SKILLDESK_CHECKPOINT_URL=f"{POSTGRES}?options=-csearch_path%3D{schema}",
        SKILLDESK_SKILLS_DIR=str(ROOT / "skills"),
        SKILLDESK_WORKFLOWS_DIR=str(ROOT / "workflows"),
        SKILLDESK_SKILLS_EMBEDDINGS="false",
        SKILLDESK_MODEL="openai/fake-model",
        SKILLDESK_MODEL_API_BASE=fake_llm.base_url,
        SKILLDESK_MODEL_API_KEY="sk-test",
        SKILLDESK_LOG_FORMAT="json",
    )
    data = tmp_path / "data"  # one folder both see (attachments, skills' data)
    first = Service(env, data)
    try:
        second = Service(env, data)
        try:
            yield first, second
        finally:
            second.stop()
    finally:
        first.stop()
        with psycopg.connect(POSTGRES, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


def say(service: Service, thread: str, message: str) -> str:
    response = httpx.post(
        f"{service.url}/v1/threads/{thread}/runs/stream", json={"message": message}, timeout=60
    )
    assert response.status_code == 200, response.text
    last = response.text.strip().split("\n\n")[-1]
    assert last.startswith("event: run_finished"), last
    return str(json.loads(last.split("data: ", 1)[1])["answer"])


def test_a_conversation_alternates_between_two_processes(
    pair: tuple[Service, Service], fake_llm: FakeLLM
) -> None:
    a, b = pair
    fake_llm.script(Reply(content="Noted: blue."), Reply(content="Blue."))
    assert say(a, "shared", "My colour is blue.") == "Noted: blue."
    assert say(b, "shared", "What is my colour?") == "Blue."
    # The second process answered with the first one's history.
    assert "My colour is blue." in str(fake_llm.requests[1]["messages"])
    for service in (a, b):
        thread = httpx.get(f"{service.url}/v1/threads/shared").json()
        assert [m["content"] for m in thread["messages"]] == [
            "My colour is blue.",
            "Noted: blue.",
            "What is my colour?",
            "Blue.",
        ]
        listed = httpx.get(f"{service.url}/v1/threads").json()["data"]
        assert [(t["thread_id"], t["messages"]) for t in listed] == [("shared", 4)]

    upload = httpx.post(
        f"{a.url}/v1/threads/shared/attachments",
        files={"file": ("notes.txt", b"shared notes", "text/plain")},
    )
    assert upload.status_code == 201
    assert httpx.get(b.url + upload.json()["url"]).content == b"shared notes"

    assert httpx.delete(f"{b.url}/v1/threads/shared").status_code == 204
    assert httpx.get(f"{a.url}/v1/threads/shared").status_code == 404
    assert httpx.get(a.url + upload.json()["url"]).status_code == 404


def test_a_workflow_started_on_one_process_is_approved_through_the_other(
    pair: tuple[Service, Service],
) -> None:
    a, b = pair
    started = httpx.post(
        f"{a.url}/v1/workflows/refund-request/runs",
        json={"inputs": {"order_id": "ORD1002"}},
        timeout=60,
    )
    assert started.status_code == 200, started.text
    record: dict[str, Any] = started.json()
    assert record["status"] == "WAITING"
    inbox = httpx.get(f"{b.url}/v1/approvals").json()["approvals"]
    assert [x["run_id"] for x in inbox] == [record["id"]]
    decided = httpx.post(
        f"{b.url}/v1/approvals/{inbox[0]['approval_id']}",
        json={"decision": "approve", "comment": "ok"},
        timeout=60,
    ).json()
    assert decided["status"] == "SUCCEEDED", decided
    seen_by_a = httpx.get(f"{a.url}/v1/workflow-runs/{record['id']}").json()
    assert seen_by_a["status"] == "SUCCEEDED"
    assert seen_by_a["nodes"]["order"]["visits"] == 1  # not run again by the second process
    again = httpx.post(
        f"{a.url}/v1/approvals/{inbox[0]['approval_id']}", json={"decision": "reject"}, timeout=60
    )
    assert again.status_code == 409  # decided once, whichever process is asked


def test_a_run_of_a_killed_process_is_finished_by_the_other(
    fake_llm: FakeLLM, tmp_path: Path
) -> None:
    schema = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(POSTGRES, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKILLDESK_")}
    env.update(
        SKILLDESK_CHECKPOINT_URL=f"{POSTGRES}?options=-csearch_path%3D{schema}",
        SKILLDESK_SKILLS_DIR=str(ROOT / "skills"),
        SKILLDESK_WORKFLOWS_DIR=str(tmp_path / "no-workflows"),
        SKILLDESK_SKILLS_EMBEDDINGS="false",
        SKILLDESK_MODEL="openai/fake-model",
        SKILLDESK_MODEL_API_BASE=fake_llm.base_url,
        SKILLDESK_MODEL_API_KEY="sk-test",
        SKILLDESK_LOG_FORMAT="json",
        SKILLDESK_RUN_LEASE_S="2",  # the survivor looks for orphaned runs every 2 s
    )
    data = tmp_path / "data"
    order = {
        "device_id": "PUMP-07",
        "title": "Replace bearing",
        "description": "Bearing wear on pump 7, vibration high.",
        "priority": "high",
    }
    call = Reply(tool_calls=[ToolCall("create_work_order", order)])
    survivor = Service(env, data)
    try:
        fake_llm.script(call)
        doomed = Service({**env, "SKILLDESK_FAILPOINTS": "tool.done=create_work_order"}, data)
        with pytest.raises(httpx.HTTPError):
            httpx.post(
                f"{doomed.url}/v1/threads/pump/runs/stream",
                json={"message": "Open a work order for pump 7's bearing.", "skill": "work-order"},
                timeout=60,
            )
        doomed.proc.wait(timeout=20)
        assert doomed.proc.returncode == -9
        fake_llm.script(call, Reply(content="Work order opened for PUMP-07."))
        deadline = time.monotonic() + 30
        while True:  # nobody asks: the survivor finds the run and finishes it
            thread = httpx.get(f"{survivor.url}/v1/threads/pump").json()
            if len(thread.get("messages", [])) == 4 or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        orders = httpx.post(
            f"{survivor.url}/v1/skills/work-order/tools/list_work_orders",
            json={"arguments": {"device_id": "PUMP-07"}},
            timeout=30,
        ).json()
    finally:
        survivor.stop()
        with psycopg.connect(POSTGRES, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")
    assert [m["role"] for m in thread["messages"]] == ["human", "ai", "tool", "ai"]
    assert thread["messages"][-1]["content"] == "Work order opened for PUMP-07."
    result = orders["result"]
    found = (
        next(v for v in result.values() if isinstance(v, list))
        if isinstance(result, dict)
        else result
    )
    assert len(found) == 1  # made once: the survivor's step replayed the journal
