"""An answer's trace outlives its stream: each run's route, nodes, tool calls and usage are
kept beside the thread, reached from the answer's message after a restart, and deleted with
the thread."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from app.main import create_app
from tests.fakellm import FakeLLM, Reply, ToolCall
from tests.skillkit import copy_fixture_skill
from tests.workflowkit import ROOT


def settings_with_skills(model_settings: Any, tmp_path: Path) -> Any:
    skills = tmp_path / "skills"
    copy_fixture_skill(skills, "storefront/order-lookup")
    return model_settings.model_copy(update={"skills_dir": skills, "skills_embeddings": True})


def test_an_answers_trace_is_kept_and_read_after_a_restart(
    model_settings: Any, tmp_path: Path, fake_llm: FakeLLM
) -> None:
    settings = settings_with_skills(model_settings, tmp_path)
    fake_llm.script(
        Reply(tool_calls=[ToolCall("get_order", {"order_id": "ORD1001"})]),
        Reply(content="ORD1001 has shipped with DHL."),
    )
    with TestClient(create_app(settings)) as client:
        ran = client.post(
            "/v1/threads/tr-1/runs/stream", json={"message": "where is my order ORD1001?"}
        )
        run_id = ran.headers["X-Run-Id"]
    with TestClient(create_app(settings)) as client:  # a restart: nothing in memory
        messages = client.get("/v1/threads/tr-1").json()["messages"]
        assert [m.get("run_id") for m in messages] == [None, None, None, run_id]
        trace = client.get(f"/v1/threads/tr-1/runs/{run_id}/trace")
        assert trace.status_code == 200, trace.text
        body = trace.json()
    assert (body["run_id"], body["thread_id"], body["status"]) == (run_id, "tr-1", "succeeded")
    assert body["ended"] >= body["started"] > 0
    kinds = [e["type"] for e in body["events"]]
    assert "token" not in kinds  # the answer is the thread's message
    route = next(e["data"] for e in body["events"] if e["type"] == "route_decided")
    assert (route["kind"], route["target"]) == ("skill", "order-lookup")
    assert route["candidates"][0]["name"] == "order-lookup"
    assert route["candidates"][0]["score"] > 0
    called = next(e["data"] for e in body["events"] if e["type"] == "tool_called")
    assert called["arguments"] == {"order_id": "ORD1001"}
    returned = next(e["data"] for e in body["events"] if e["type"] == "tool_returned")
    assert "shipped" in returned["content"]
    timed = [e["data"]["ms"] for e in body["events"] if e["type"] == "node_finished"]
    assert timed
    assert all(ms >= 0 for ms in timed)
    assert kinds[-1] == "run_finished"
    assert body["events"][-1]["data"]["usage"]["model_calls"] == 2


def test_a_trace_goes_with_its_thread(model_settings: Any, fake_llm: FakeLLM) -> None:
    fake_llm.script(Reply(content="Hello."))
    with TestClient(create_app(model_settings)) as client:
        run_id = client.post("/v1/threads/tr-2/runs/stream", json={"message": "hi"}).headers[
            "X-Run-Id"
        ]
        assert client.get(f"/v1/threads/tr-2/runs/{run_id}/trace").status_code == 200
        assert client.delete("/v1/threads/tr-2").status_code == 204
        # The same id again, a new thread: the old run's trace is not in it.
        assert client.post("/v1/threads", json={"thread_id": "tr-2"}).status_code == 201
        gone = client.get(f"/v1/threads/tr-2/runs/{run_id}/trace")
        assert gone.status_code == 404
        assert gone.json()["error"]["code"] == "run_not_found"


def test_another_threads_run_has_no_trace_here(model_settings: Any, fake_llm: FakeLLM) -> None:
    fake_llm.script(Reply(content="Hello."))
    with TestClient(create_app(model_settings)) as client:
        run_id = client.post("/v1/threads/tr-3/runs/stream", json={"message": "hi"}).headers[
            "X-Run-Id"
        ]
        client.post("/v1/threads", json={"thread_id": "tr-4"})
        assert client.get(f"/v1/threads/tr-4/runs/{run_id}/trace").status_code == 404


def test_a_failed_run_is_shown_after_the_message_it_followed_with_its_trace(
    model_settings: Any, fake_llm: FakeLLM
) -> None:
    fake_llm.script(*[Reply(status=500)] * 3)  # the first try and two retries
    with TestClient(create_app(model_settings)) as client:
        run_id = client.post("/v1/threads/tr-5/runs/stream", json={"message": "hi"}).headers[
            "X-Run-Id"
        ]
    with TestClient(create_app(model_settings)) as client:  # after a restart
        messages = client.get("/v1/threads/tr-5").json()["messages"]
        assert [m["role"] for m in messages] == ["human"]
        failed = messages[0]["failed_run"]
        assert (failed["run_id"], failed["code"]) == (run_id, "model_unavailable")
        assert failed["message"]
        trace = client.get(f"/v1/threads/tr-5/runs/{run_id}/trace").json()
    assert trace["status"] == "failed"
    assert trace["events"][-1]["type"] == "run_failed"
    assert any(e["type"] == "route_decided" for e in trace["events"])


def test_a_fork_keeps_the_traces_of_the_answers_it_copies(
    model_settings: Any, fake_llm: FakeLLM
) -> None:
    fake_llm.script(Reply(content="Hello."), Reply(content="Bye."))
    with TestClient(create_app(model_settings)) as client:
        first = client.post("/v1/threads/tr-6/runs/stream", json={"message": "hi"})
        client.post("/v1/threads/tr-6/runs/stream", json={"message": "bye"})
        forked = client.post(
            "/v1/threads/tr-6/fork", json={"before_message": 2, "thread_id": "tr-7"}
        )
        assert forked.status_code == 201, forked.text
        messages = client.get("/v1/threads/tr-7").json()["messages"]
        assert [m["content"] for m in messages] == ["hi", "Hello."]
        copied = messages[1]["run_id"]
        assert copied != first.headers["X-Run-Id"]  # the fork's own copy
        assert client.delete("/v1/threads/tr-6").status_code == 204
        trace = client.get(f"/v1/threads/tr-7/runs/{copied}/trace")
        assert trace.status_code == 200, trace.text
        assert trace.json()["events"][-1]["type"] == "run_finished"


def test_the_message_an_approval_leads_to_unfolds_the_nodes_run_after_it(
    model_settings: Any, fake_llm: FakeLLM
) -> None:
    settings = model_settings.model_copy(
        update={"skills_dir": ROOT / "skills", "workflows_dir": ROOT / "workflows"}
    )
    with TestClient(create_app(settings)) as client:
        asked = client.post(
            "/v1/threads/tr-8/runs/stream", json={"message": "I want a refund for order ORD1002."}
        )
        assert "approval_required" in asked.text, asked.text
        inbox = client.get("/v1/approvals").json()["approvals"]
        decided = client.post(
            f"/v1/approvals/{inbox[0]['approval_id']}",
            json={"decision": "approve", "comment": "ok"},
        )
        assert decided.json()["status"] == "SUCCEEDED", decided.text
        told = client.get("/v1/threads/tr-8").json()["messages"][-1]
        assert "approved" in told["content"]
        trace = client.get(f"/v1/threads/tr-8/runs/{told['run_id']}/trace").json()
    finished = [e["data"]["node"] for e in trace["events"] if e["type"] == "node_finished"]
    assert finished  # the nodes after the gate, as the run streamed them
    assert all(e["data"].get("workflow") == "refund-request" for e in trace["events"][:-1])
    assert trace["status"] == "succeeded"


NOTICE = """\
name: notice
version: 1
description: A notice written by the model once someone approves it.
intent:
  keywords: [post a notice]
inputs:
  text: {type: string, pattern: "[:：]\\\\s*(\\\\S.*)"}
nodes:
  - id: gate
    kind: approval
    summary: "Post a notice about {{ inputs.text }}?"
    next: write
  - id: write
    kind: llm
    prompt: "Write the notice: {{ inputs.text }}"
outputs:
  message: "{{ nodes.write.output }}"
"""


def test_the_model_calls_a_workflow_makes_after_an_approval_count_in_the_threads_usage(
    model_settings: Any, tmp_path: Path, fake_llm: FakeLLM
) -> None:
    workflows = tmp_path / "workflows"
    workflows.mkdir()
    (workflows / "notice.yaml").write_text(NOTICE)
    settings = model_settings.model_copy(update={"workflows_dir": workflows})
    fake_llm.script(
        Reply(
            content="The lift is closed today.", usage={"prompt_tokens": 30, "completion_tokens": 6}
        )
    )
    with TestClient(create_app(settings)) as client:
        asked = client.post(
            "/v1/threads/tr-9/runs/stream", json={"message": "post a notice: the lift is closed"}
        )
        assert "approval_required" in asked.text, asked.text
        assert client.get("/v1/threads/tr-9").json()["usage"].get("model_calls", 0) == 0
        [waiting] = client.get("/v1/approvals").json()["approvals"]
        decided = client.post(
            f"/v1/approvals/{waiting['approval_id']}", json={"decision": "approve"}
        )
        assert decided.json()["status"] == "SUCCEEDED", decided.text
        assert decided.json()["usage"]["model_calls"] == 1
        thread = client.get("/v1/threads/tr-9").json()
    assert thread["messages"][-1]["content"].endswith("The lift is closed today.")
    assert thread["usage"]["model_calls"] == 1
    assert thread["usage"]["input_tokens"] == 30
