"""The bundled workflows run end to end on the bundled skills: over HTTP, from chat, with
approvals decided through the inbox (approve, reject, twice), and execution records."""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from redis.exceptions import ConnectionError as RedisConnectionError

from app.main import create_app
from tests.fakellm import FakeLLM, Reply, ToolCall
from tests.servekit import read_events, serving

ROOT = Path(__file__).parents[2]


@pytest.fixture
def client(model_settings: Any, tmp_path: Path) -> Iterator[TestClient]:
    settings = model_settings.model_copy(
        update={"skills_dir": ROOT / "skills", "workflows_dir": ROOT / "workflows"}
    )
    with TestClient(create_app(settings)) as test_client:
        yield test_client


def start(client: TestClient, name: str, **inputs: Any) -> dict[str, Any]:
    response = client.post(f"/v1/workflows/{name}/runs", json={"inputs": inputs})
    assert response.status_code == 200, response.text
    return dict(response.json())


def test_the_bundled_workflows_are_listed_with_their_graphs(client: TestClient) -> None:
    listed = client.get("/v1/workflows").json()
    names = {w["name"] for w in listed["workflows"]}
    assert {"equipment-maintenance", "refund-request", "order-overview", "announcement"} <= names
    assert listed["errors"] == []
    one = client.get("/v1/workflows/refund-request").json()
    assert one["mermaid"].startswith("flowchart")
    assert one["definition"]["nodes"][0]["id"] == "order"
    assert client.get("/v1/workflows/nope").status_code == 404


def test_a_small_refund_is_approved_without_a_person(client: TestClient) -> None:
    record = start(client, "refund-request", order_id="ORD1001")  # 159 CNY
    assert record["status"] == "SUCCEEDED", record
    assert "approved automatically" in record["outputs"]["message"]
    assert list(record["nodes"]) == ["order", "amount", "auto_approve", "confirm"]
    assert client.get("/v1/approvals").json() == {"approvals": [], "total": 0, "next_cursor": None}


def test_a_large_refund_waits_for_the_inbox_and_resumes_when_approved(
    client: TestClient,
) -> None:
    before = time.time()
    record = start(client, "refund-request", order_id="ORD1002")  # 488 CNY
    assert record["status"] == "WAITING"
    inbox = client.get("/v1/approvals").json()
    [pending] = inbox["approvals"]
    assert before <= pending["asked"] <= time.time()  # when it was asked, for the inbox
    assert (inbox["total"], inbox["next_cursor"]) == (1, None)
    assert pending["run_id"] == record["id"]
    assert "Refund 488" in pending["summary"]
    assert pending["data"]["order_id"] == "ORD1002"
    decided = client.post(
        f"/v1/approvals/{pending['approval_id']}", json={"decision": "approve", "by": "ann"}
    )
    assert decided.status_code == 200, decided.text
    assert decided.json()["status"] == "SUCCEEDED"
    assert "is approved" in decided.json()["outputs"]["message"]
    body = {"inputs": {"order_id": "ORD1001"}, "stream": True}
    stream = client.post("/v1/workflows/refund-request/runs", json=body)
    events = [json.loads(x[6:]) for x in stream.text.splitlines() if x.startswith("data: ")]
    finished = [e for e in events if e["type"] == "node_finished"]
    assert finished[0]["node"] == "order"
    assert '"order_id": "ORD1001"' in finished[0]["output"]
    again = client.post(f"/v1/approvals/{pending['approval_id']}", json={"decision": "reject"})
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "already_decided"
    # QA: its approval node at a visit the run never made was "ended SUCCEEDED without a
    # decision", a 409: the run ended waiting at nothing.
    later = pending["approval_id"][:-1] + str(int(pending["approval_id"][-1]) + 1)
    unknown = client.post(f"/v1/approvals/{later}", json={"decision": "approve"})
    assert (unknown.status_code, unknown.json()["error"]["code"]) == (404, "approval_not_found")
    stored = client.get(f"/v1/workflow-runs/{record['id']}").json()
    assert stored["status"] == "SUCCEEDED"
    assert stored["nodes"]["approve"]["output"]["by"] == "ann"
    assert client.get("/v1/approvals").json()["approvals"] == []
    # An id no run asked for is an approval not found, named as one (it was `run_not_found`,
    # about a workflow run the client never named).
    missing = client.post("/v1/approvals/nope", json={"decision": "approve"})
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "approval_not_found"
    assert "approval 'nope'" in missing.json()["error"]["message"]


def test_a_rejected_refund_tells_the_customer_why(client: TestClient) -> None:
    record = start(client, "refund-request", order_id="ORD1003")
    approval = record["waiting"]["approval_id"]
    decided = client.post(
        f"/v1/approvals/{approval}", json={"decision": "reject", "comment": "worn item"}
    ).json()
    assert decided["status"] == "SUCCEEDED"
    assert "refused: worn item" in decided["outputs"]["message"]
    assert "refused" in decided["nodes"]


def test_a_decision_sent_again_is_told_which_was_taken_by_whom_and_when(
    client: TestClient,
) -> None:
    # QA: the 409 `already_decided` said neither, so a client that sent its decision again
    # (its answer lost) could not tell whether its own had applied.
    record = start(client, "refund-request", order_id="ORD1003")
    approval = record["waiting"]["approval_id"]
    body = {"decision": "reject", "by": "ann", "comment": "worn item"}
    assert client.post(f"/v1/approvals/{approval}", json=body).status_code == 200
    for decision in ("reject", "approve"):
        again = client.post(f"/v1/approvals/{approval}", json={"decision": decision})
        assert again.status_code == 409, again.text
        error = again.json()["error"]
        assert error["code"] == "already_decided"
        run = record["id"]
        said = re.escape(
            f"Approval {approval} was decided already: rejected by ann at WHEN (comment: "
            "'worn item'). This request changed nothing; if that decision was this client's "
            f"(sent again after a lost answer), it stands. GET /v1/workflow-runs/{run} shows "
            f"run {run}, now SUCCEEDED."
        )
        taken = re.fullmatch(said.replace("WHEN", r"(\S+Z)"), error["message"])
        assert taken is not None, error["message"]
        at = datetime.strptime(taken[1], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
        assert abs(at.timestamp() - time.time()) < 60


def test_a_forked_run_names_its_parent_over_http(client: TestClient) -> None:
    original = start(client, "refund-request", order_id="ORD1001")
    assert original["parent"] is None
    forked = client.post(f"/v1/workflow-runs/{original['id']}/fork", json={"node": "amount"})
    assert forked.status_code == 200, forked.text
    fork = forked.json()
    assert fork["id"] != original["id"]
    assert fork["parent"] == f"{original['id']}@amount"
    assert client.get(f"/v1/workflow-runs/{fork['id']}").json()["parent"] == fork["parent"]
    listed = client.get("/v1/workflow-runs", params={"workflow": "refund-request"}).json()
    assert {r["id"]: r["parent"] for r in listed["runs"]} == {
        original["id"]: None,
        fork["id"]: f"{original['id']}@amount",
    }


def test_a_run_that_failed_at_a_node_is_forked_from_it_with_its_inputs_corrected(
    client: TestClient,
) -> None:
    # QA: on SQLite this was a 500 (the failed node's error, a pending write, carried over).
    failed = start(client, "refund-request", order_id="ORD9999")
    assert failed["status"] == "FAILED", failed
    assert "order" in failed["error"]
    body = {"node": "order", "inputs": {"order_id": "ORD1001"}}
    forked = client.post(f"/v1/workflow-runs/{failed['id']}/fork", json=body)
    assert forked.status_code == 200, forked.text
    fork = forked.json()
    assert fork["status"] == "SUCCEEDED", fork
    assert fork["inputs"]["order_id"] == "ORD1001"
    assert list(fork["nodes"]) == ["order", "amount", "auto_approve", "confirm"]
    again = client.post(f"/v1/workflow-runs/{failed['id']}/fork", json={"node": "order"})
    assert again.status_code == 200, again.text
    assert again.json()["status"] == "FAILED"  # the same inputs fail the same way
    assert client.get(f"/v1/workflow-runs/{failed['id']}").json()["status"] == "FAILED"


def test_a_fork_from_a_node_the_run_did_not_run_is_a_bad_request_naming_its_nodes(
    client: TestClient,
) -> None:
    original = start(client, "refund-request", order_id="ORD1001")
    forked = client.post(f"/v1/workflow-runs/{original['id']}/fork", json={"node": "nowhere"})
    assert forked.status_code == 400, forked.text
    error = forked.json()["error"]
    assert (error["code"], error["param"]) == ("invalid_request", "node")
    assert "'nowhere'" in error["message"]
    assert ", ".join(original["nodes"]) in error["message"]


def test_a_fork_of_a_run_waiting_for_a_decision_says_so_and_forks_once_it_has_ended(
    client: TestClient,
) -> None:
    waiting = start(client, "refund-request", order_id="ORD1002")  # 488 CNY: it waits
    approval = waiting["waiting"]["approval_id"]
    refused = client.post(f"/v1/workflow-runs/{waiting['id']}/fork", json={"node": "amount"})
    assert refused.status_code == 409, refused.text
    error = refused.json()["error"]
    assert error["code"] == "run_waiting"  # nothing was decided
    assert f"waiting for a decision on approval {approval}" in error["message"]
    assert "forked once it has ended" in error["message"]
    client.post(f"/v1/approvals/{approval}", json={"decision": "approve"})
    forked = client.post(f"/v1/workflow-runs/{waiting['id']}/fork", json={"node": "amount"})
    assert forked.status_code == 200, forked.text


@pytest.mark.parametrize("status", ["bogus", "waiting"])
def test_runs_listed_by_a_status_that_is_not_one_are_a_bad_request(
    client: TestClient, status: str
) -> None:
    listed = client.get("/v1/workflow-runs", params={"status": status})
    assert listed.status_code == 400, listed.text
    error = listed.json()["error"]
    assert error["param"] == "status"
    assert "'RUNNING', 'WAITING', 'SUCCEEDED', 'FAILED' or 'CANCELLED'" in error["message"]
    assert client.get("/v1/workflow-runs", params={"status": "WAITING"}).status_code == 200


def test_a_start_sent_again_with_its_key_answers_the_first_run_and_starts_nothing(
    client: TestClient,
) -> None:
    url, key = "/v1/workflows/refund-request/runs", {"Idempotency-Key": "refund-7"}
    body = {"inputs": {"order_id": "ORD1002"}}
    first = client.post(url, json=body, headers=key)
    assert first.status_code == 200, first.text
    assert first.json()["status"] == "WAITING"
    again = client.post(url, json=body, headers=key)  # a retry after a timeout
    assert again.status_code == 200, again.text
    assert again.json()["id"] == first.json()["id"]
    assert len(client.get("/v1/approvals").json()["approvals"]) == 1  # one refund asked for
    streamed = client.post(url, json={**body, "stream": True}, headers=key)
    events = [json.loads(x[6:]) for x in streamed.text.splitlines() if x.startswith("data: ")]
    assert [e["type"] for e in events] == ["workflow_waiting"]  # as it stands: it waits
    assert events[0]["record"]["id"] == first.json()["id"]
    assert events[0]["replayed"] is True
    # After the decision, a retry reads the run as it stands now.
    approval = first.json()["waiting"]["approval_id"]
    client.post(f"/v1/approvals/{approval}", json={"decision": "approve"})
    assert client.post(url, json=body, headers=key).json()["status"] == "SUCCEEDED"
    other = client.post(url, json={"inputs": {"order_id": "ORD1003"}}, headers=key)
    assert other.status_code == 409
    assert other.json()["error"]["code"] == "idempotency_key_reused"
    assert "ORD1002" in other.json()["error"]["message"]
    fresh = client.post(url, json=body, headers={"Idempotency-Key": "refund-8"})
    assert fresh.json()["id"] != first.json()["id"]
    runs = client.get("/v1/workflow-runs", params={"workflow": "refund-request"}).json()["runs"]
    assert len(runs) == 2


def test_a_streamed_run_that_waits_for_an_approval_says_so_not_that_it_ended(
    client: TestClient,
) -> None:
    # QA: its stream ended with `workflow_ended`, which a client reads as the run over.
    url = "/v1/workflows/refund-request/runs"
    body = {"inputs": {"order_id": "ORD1002"}, "stream": True}
    streamed = client.post(url, json=body)
    events = [json.loads(x[6:]) for x in streamed.text.splitlines() if x.startswith("data: ")]
    kinds = [x[7:] for x in streamed.text.splitlines() if x.startswith("event: ")]
    assert kinds == [e["type"] for e in events]
    assert kinds[-2:] == ["approval_required", "workflow_waiting"]
    assert "workflow_ended" not in kinds
    last = events[-1]
    assert last["record"]["status"] == "WAITING"
    assert last["approval"] == last["record"]["waiting"]
    assert last["approval"]["approval_id"] == events[-2]["approval_id"]
    assert last["approval"]["run_id"] == last["record"]["id"] == streamed.headers["X-Run-Id"]
    decided = client.post(
        f"/v1/approvals/{last['approval']['approval_id']}", json={"decision": "approve"}
    )
    assert decided.json()["status"] == "SUCCEEDED"
    # A run that is over ends its stream with `workflow_ended`.
    small = client.post(url, json={**body, "inputs": {"order_id": "ORD1001"}})
    kinds = [x[7:] for x in small.text.splitlines() if x.startswith("event: ")]
    assert kinds[-1] == "workflow_ended"
    assert "workflow_waiting" not in kinds
    ended = json.loads(small.text.strip().splitlines()[-1][6:])
    assert ended["record"]["status"] == "SUCCEEDED"


def test_bad_inputs_and_unknown_ids_are_clear_errors(client: TestClient) -> None:
    missing = client.post("/v1/workflows/refund-request/runs", json={"inputs": {}})
    assert missing.status_code == 400
    assert missing.json()["error"]["code"] == "invalid_inputs"
    assert "'order_id' is required" in missing.json()["error"]["message"]
    assert client.get("/v1/workflow-runs/nope").status_code == 404
    bad_thread = {"inputs": {"order_id": "ORD1001"}, "thread_id": "../x"}
    refused = client.post("/v1/workflows/refund-request/runs", json=bad_thread)
    assert refused.status_code == 400
    assert refused.json()["error"]["param"] == "thread_id"
    assert client.post("/v1/approvals/nope-x-0", json={"decision": "approve"}).status_code == 404


def test_a_run_started_over_http_on_a_new_thread_tells_that_thread_the_decision(
    client: TestClient,
) -> None:
    bad = {"inputs": {}, "thread_id": "wf-never"}
    assert client.post("/v1/workflows/refund-request/runs", json=bad).status_code == 400
    assert client.get("/v1/threads/wf-never").status_code == 404  # a refused start makes none
    body = {"inputs": {"order_id": "ORD1002"}, "thread_id": "wf-new"}  # 488 CNY: it waits
    run = client.post("/v1/workflows/refund-request/runs", json=body).json()
    assert run["status"] == "WAITING"
    [pending] = client.get("/v1/approvals").json()["approvals"]
    client.post(f"/v1/approvals/{pending['approval_id']}", json={"decision": "approve"})
    thread = client.get("/v1/threads/wf-new").json()
    assert thread["title"] == "Workflow refund-request"
    assert "is approved" in thread["messages"][-1]["content"]


def test_a_refund_from_chat_waits_and_the_thread_hears_the_decision(
    client: TestClient, fake_llm: FakeLLM
) -> None:
    chat = {
        "model": "skilldesk",
        "messages": [{"role": "user", "content": "I want a refund for order ORD1017."}],
    }
    headers = {"X-Thread-Id": "refund-chat"}
    answer = client.post("/v1/chat/completions", json=chat, headers=headers).json()
    text = answer["choices"][0]["message"]["content"]
    assert "waiting for approval" in text
    [pending] = client.get("/v1/approvals").json()["approvals"]
    assert pending["thread_id"] == "refund-chat"
    client.post(f"/v1/approvals/{pending['approval_id']}", json={"decision": "approve"})
    thread = client.get("/v1/threads/refund-chat").json()
    assert thread["route"]["kind"] == "workflow"
    assert "is approved" in thread["messages"][-1]["content"]
    assert fake_llm.requests == []  # no model call: tools, a switch and an approval


def test_a_missing_input_is_asked_for_in_chat_and_the_next_message_gives_it(
    client: TestClient,
) -> None:
    headers = {"X-Thread-Id": "refund-ask"}

    def say(text: str) -> str:
        body = {"model": "skilldesk", "messages": [{"role": "user", "content": text}]}
        reply = client.post("/v1/chat/completions", json=body, headers=headers).json()
        return str(reply["choices"][0]["message"]["content"])

    asked = say("I want a refund please")
    assert "order_id" in asked
    done = say("ORD1026")  # 129 CNY: approved at once
    assert "approved automatically" in done


def test_the_maintenance_procedure_runs_from_chat_to_one_approved_work_order(
    client: TestClient, fake_llm: FakeLLM
) -> None:
    fake_llm.script(Reply(content="Likely spindle bearing wear: check vibration, then lube."))
    body = {
        "model": "skilldesk",
        "messages": [
            {"role": "user", "content": "CNC-001 is down, run the maintenance procedure."}
        ],
    }
    headers = {"X-Thread-Id": "maintenance-1"}
    answer = client.post("/v1/chat/completions", json=body, headers=headers).json()
    assert "waiting for approval" in answer["choices"][0]["message"]["content"]
    [pending] = client.get("/v1/approvals").json()["approvals"]
    assert pending["workflow"] == "equipment-maintenance"
    assert "spindle bearing wear" in pending["data"]["diagnosis"]
    order_id = pending["data"]["work_order"]
    assert order_id.startswith("WO-")
    record = client.post(
        f"/v1/approvals/{pending['approval_id']}", json={"decision": "approve", "by": "sam"}
    ).json()
    assert record["status"] == "SUCCEEDED", record
    assert list(record["nodes"]) == [
        "alarms",
        "readings",
        "knowledge",
        "diagnosis",
        "work_order",
        "approve",
        "dispatch",
    ]
    assert "A technician is on the way." in record["outputs"]["message"]
    # The expert saw the tools' data in its task.
    task = fake_llm.requests[0]["messages"][-1]["content"]
    assert "CNC-001" in task
    listed = client.post(
        "/v1/skills/work-order/tools/list_work_orders", json={"arguments": {"device_id": "CNC-001"}}
    ).json()
    assert str(listed["result"]).count(order_id) == 1
    thread = client.get("/v1/threads/maintenance-1").json()
    assert order_id in thread["messages"][-1]["content"]


def test_the_order_overview_looks_up_in_parallel_and_joins(
    client: TestClient, fake_llm: FakeLLM
) -> None:
    fake_llm.script(Reply(content="Delivered within 7 days: it can still be returned."))
    record = start(client, "order-overview", order_id="ORD1017")
    assert record["status"] == "SUCCEEDED", record
    assert record["nodes"]["together"]["visits"] == 1
    message = record["outputs"]["message"]
    assert "Order ORD1017 is delivered" in message
    assert "it can still be returned" in message


def test_the_announcement_is_written_by_the_model_and_spoken(
    client: TestClient, fake_llm: FakeLLM
) -> None:
    fake_llm.script(Reply(content="Attention please. The canteen closes at two today."))
    record = start(client, "announcement", text="the canteen closes at 2 pm today")
    if record["status"] == "FAILED" and "espeak-ng" in (record["error"] or ""):
        pytest.skip("espeak-ng is not installed")
    assert record["status"] == "SUCCEEDED", record
    assert "The canteen closes at two today." in record["outputs"]["message"]
    assert ".wav" in record["outputs"]["message"]


def test_a_workflow_without_model_nodes_runs_from_chat_in_no_model_mode(
    make_settings: Any,
) -> None:
    settings = make_settings(skills_dir=ROOT / "skills", workflows_dir=ROOT / "workflows")
    body = {
        "model": "skilldesk",
        "messages": [{"role": "user", "content": "I want a refund for order ORD1026."}],
    }
    with TestClient(create_app(settings)) as client:
        answer = client.post("/v1/chat/completions", json=body).json()
    assert "approved automatically" in answer["choices"][0]["message"]["content"]


@pytest.mark.parametrize(
    ("message", "reply", "says"),
    [
        (
            "Give me an overview of order ORD1017.",
            "Delivered within 7 days: it can still be returned.",
            "Order ORD1017 is delivered",
        ),
        pytest.param(
            "Announce to everyone: the canteen closes at 2 pm today.",
            "Attention please. The canteen closes at two today.",
            ".wav",
            marks=pytest.mark.skipif(
                shutil.which("espeak-ng") is None, reason="espeak-ng is not installed"
            ),
        ),
    ],
)
def test_the_model_using_workflows_run_from_chat(
    client: TestClient, fake_llm: FakeLLM, message: str, reply: str, says: str
) -> None:
    fake_llm.script(Reply(content=reply, usage={"prompt_tokens": 40, "completion_tokens": 9}))
    body = {"model": "skilldesk", "messages": [{"role": "user", "content": message}]}
    answer = client.post("/v1/chat/completions", json=body, headers={"X-Thread-Id": "wf-chat"})
    text = answer.json()["choices"][0]["message"]["content"]
    assert says in text
    thread = client.get("/v1/threads/wf-chat").json()
    assert thread["route"]["kind"] == "workflow"
    # The workflow's model call is the turn's and the thread's: counted and costed with them.
    assert answer.json()["usage"]["prompt_tokens"] == 40
    assert thread["usage"]["model_calls"] == 1
    assert thread["usage"]["input_tokens"] == 40
    [run] = client.get("/v1/workflow-runs").json()["runs"]
    assert run["usage"]["model_calls"] == 1


def test_a_workflows_model_text_is_not_streamed_as_the_answers_tokens(
    client: TestClient, fake_llm: FakeLLM
) -> None:
    fake_llm.script(Reply(content="Delivered within 7 days: it can still be returned."))
    message = "Give me an overview of order ORD1017."
    events = client.post("/v1/threads/wf-tokens/runs/stream", json={"message": message}).text
    assert "event: run_finished" in events
    assert "within 7 days" in events  # in the answer, not as the returns expert's tokens
    assert "event: token" not in events


def test_the_inbox_is_read_a_page_at_a_time_and_by_thread(client: TestClient) -> None:
    made = []
    for thread in ("t-one", "t-two", "t-two"):
        body = {"inputs": {"order_id": "ORD1002"}, "thread_id": thread}  # 488 CNY: it waits
        made.append(client.post("/v1/workflows/refund-request/runs", json=body).json()["id"])
    first = client.get("/v1/approvals", params={"limit": 2}).json()
    assert [a["run_id"] for a in first["approvals"]] == made[:0:-1]
    assert first["total"] == 3
    rest = client.get("/v1/approvals", params={"cursor": first["next_cursor"]}).json()
    assert ([a["run_id"] for a in rest["approvals"]], rest["next_cursor"]) == (made[:1], None)
    on_one = client.get("/v1/approvals", params={"thread_id": "t-one"}).json()
    assert ([a["run_id"] for a in on_one["approvals"]], on_one["total"]) == (made[:1], 3)
    wrong = client.get("/v1/approvals", params={"cursor": "yesterday"})
    assert wrong.status_code == 400


def test_the_decision_told_to_the_thread_counts_in_its_record_and_moves_it_up(
    client: TestClient, fake_llm: FakeLLM
) -> None:
    chat = {
        "model": "skilldesk",
        "messages": [{"role": "user", "content": "I want a refund for order ORD1017."}],
    }
    client.post("/v1/chat/completions", json=chat, headers={"X-Thread-Id": "wf-chat-1"})
    assert client.post("/v1/threads", json={"title": "Later"}).status_code in (200, 201)
    listed = client.get("/v1/threads").json()["data"]
    assert [t["thread_id"] for t in listed][1] == "wf-chat-1"
    [pending] = client.get("/v1/approvals").json()["approvals"]
    client.post(f"/v1/approvals/{pending['approval_id']}", json={"decision": "approve"})
    thread = client.get("/v1/threads/wf-chat-1").json()
    [first, *_] = client.get("/v1/threads").json()["data"]
    assert first["thread_id"] == "wf-chat-1"
    assert first["messages"] == len(thread["messages"]) == 3
    assert first["updated"] > listed[1]["updated"]


def _refund_waiting_on(client: TestClient, thread_id: str) -> dict[str, Any]:
    chat = {
        "model": "skilldesk",
        "messages": [{"role": "user", "content": "I want a refund for order ORD1017."}],
    }
    client.post("/v1/chat/completions", json=chat, headers={"X-Thread-Id": thread_id})
    [pending] = client.get("/v1/approvals").json()["approvals"]
    assert pending["thread_id"] == thread_id
    return dict(pending)


def test_deleting_a_thread_takes_its_waiting_approvals_out_of_the_inbox(
    client: TestClient, fake_llm: FakeLLM
) -> None:
    pending = _refund_waiting_on(client, "wf-gone")
    assert client.delete("/v1/threads/wf-gone").status_code == 204
    assert client.get("/v1/approvals").json() == {"approvals": [], "total": 0, "next_cursor": None}
    run = client.get(f"/v1/workflow-runs/{pending['run_id']}").json()
    assert run["status"] == "CANCELLED"
    late = client.post(f"/v1/approvals/{pending['approval_id']}", json={"decision": "approve"})
    assert late.status_code == 409
    assert client.get("/v1/threads/wf-gone").status_code == 404


def test_an_outcome_told_to_a_thread_deleted_meanwhile_does_not_make_it_again(
    client: TestClient, fake_llm: FakeLLM
) -> None:
    _refund_waiting_on(client, "wf-raced")
    services = client.app.state.services  # type: ignore[attr-defined]
    # The decision raced the delete: the run resumed before the delete cancelled it.
    services.threads.workflows = None
    assert client.delete("/v1/threads/wf-raced").status_code == 204
    [pending] = client.get("/v1/approvals").json()["approvals"]
    decided = client.post(f"/v1/approvals/{pending['approval_id']}", json={"decision": "approve"})
    # It goes no further than its next step (its thread is gone), and telling that thread
    # how it ended does not make it again.
    assert (decided.json()["status"], decided.json()["error"]) == (
        "CANCELLED",
        "its thread was deleted",
    )
    assert client.get("/v1/threads/wf-raced").status_code == 404
    assert client.get("/v1/threads").json()["data"] == []


async def test_a_decided_run_cut_off_and_resumed_elsewhere_still_tells_its_thread(
    model_settings: Any,
) -> None:
    # The process that took the decision stopped mid-way (its request cut off); the run is
    # resumed as an orphan: the thread it came from is told how it ended all the same (only
    # the deciding request used to tell it).
    from app.services import open_services

    settings = model_settings.model_copy(
        update={"skills_dir": ROOT / "skills", "workflows_dir": ROOT / "workflows"}
    )
    async with open_services(settings) as services:
        await services.threads.ensure("wf-cut", owner=None, title="Workflow refund-request")
        record = await services.engine.run(
            "refund-request", {"order_id": "ORD1002"}, thread_id="wf-cut"
        )
        approval = record["waiting"]["approval_id"]
        going = services.engine.decide(approval, approved=True, by="sam")
        await anext(going)  # the run goes on from the decision ...
        await going.aclose()  # ... and its request is cut off
        assert (await services.engine.get_run(record["id"]))["status"] == "RUNNING"
        assert await services.engine.resume_orphans() == [record["id"]]
        messages = (await services.conversations.state("wf-cut")).get("messages", [])
    assert messages, "the thread was not told"
    assert "is approved" in messages[-1].content


def test_a_cancel_of_a_chat_run_waiting_for_an_approval_says_it_is_not_under_way(
    client: TestClient, fake_llm: FakeLLM
) -> None:
    body = {"message": "I want a refund for order ORD1017.", "stream": True}
    streamed = client.post("/v1/threads/wf-stop/runs", json=body)
    run_id = streamed.headers["X-Run-Id"]
    run = client.get(f"/v1/threads/wf-stop/runs/{run_id}").json()
    assert run["status"] == "interrupted"
    refused = client.post(f"/v1/threads/wf-stop/runs/{run_id}/cancel")
    assert refused.status_code == 409, refused.text
    error = refused.json()["error"]
    assert error["code"] == "run_not_active"
    assert "interrupted" in error["message"]
    assert "GET /v1/approvals?thread_id=wf-stop" in error["message"]
    [pending] = client.get("/v1/approvals").json()["approvals"]  # nothing changed
    assert pending["thread_id"] == "wf-stop"
    assert client.get(f"/v1/threads/wf-stop/runs/{run_id}").json() == run


def test_an_interrupted_chat_run_names_its_approval_and_the_workflow_run_that_goes_on(
    client: TestClient, fake_llm: FakeLLM
) -> None:
    # QA: the run said `interrupted` forever after the decision; a client polling it never
    # learned where the outcome went.
    body = {"message": "I want a refund for order ORD1017.", "stream": True}
    run_id = client.post("/v1/threads/wf-link/runs", json=body).headers["X-Run-Id"]
    run = client.get(f"/v1/threads/wf-link/runs/{run_id}").json()
    [pending] = client.get("/v1/approvals?thread_id=wf-link").json()["approvals"]
    assert run["approval"] == {
        "approval_id": pending["approval_id"],
        "workflow_run_id": pending["run_id"],
    }
    decided = client.post(
        f"/v1/approvals/{pending['approval_id']}", json={"decision": "reject", "comment": "no"}
    )
    assert decided.status_code == 200, decided.text
    followed = client.get(f"/v1/workflow-runs/{run['approval']['workflow_run_id']}").json()
    assert followed["status"] == "SUCCEEDED"
    assert client.get(f"/v1/threads/wf-link/runs/{run_id}").json()["status"] == "interrupted"
    fake_llm.script(Reply(content="Hello."))
    answered = client.post("/v1/threads/wf-link/runs", json={"message": "hi", "stream": True})
    later = answered.headers["X-Run-Id"]
    assert client.get(f"/v1/threads/wf-link/runs/{later}").json()["approval"] is None


def test_a_waiting_run_is_cancelled_by_its_starter_and_its_thread_is_told(
    client: TestClient,
) -> None:
    pending = _refund_waiting_on(client, "wf-withdrawn")
    run_id = pending["run_id"]
    cancelled = client.post(f"/v1/workflow-runs/{run_id}/cancel")
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["status"] == "CANCELLED"
    assert client.get("/v1/approvals").json()["approvals"] == []
    thread = client.get("/v1/threads/wf-withdrawn").json()
    assert "was cancelled while it waited for approval" in thread["messages"][-1]["content"]
    again = client.post(f"/v1/workflow-runs/{run_id}/cancel")
    assert (again.status_code, again.json()["error"]["code"]) == (409, "run_ended")
    late = client.post(f"/v1/approvals/{pending['approval_id']}", json={"decision": "approve"})
    assert late.status_code == 409
    # Nobody decided it: the answer says its run was cancelled ("was decided already", before).
    message = late.json()["error"]["message"]
    assert "can no longer be decided" in message
    assert "CANCELLED without a decision" in message
    # Ids the ended run never asked for (no such node; a node that is no approval) are not
    # found, not "can no longer be decided".
    # QA: also its approval node at a visit it never made.
    node, _, visit = pending["approval_id"].removeprefix(f"{run_id}-").rpartition("-")
    later = f"{run_id}-{node}-{int(visit) + 1}"
    for never in (f"{run_id}-nowhere-0", f"{run_id}-order-0", later):
        unknown = client.post(f"/v1/approvals/{never}", json={"decision": "approve"})
        assert unknown.status_code == 404, unknown.text
        assert unknown.json()["error"]["code"] == "approval_not_found"
        assert f"there is no approval {never!r}" in unknown.json()["error"]["message"]
    assert client.get(f"/v1/workflow-runs/{run_id}").json()["status"] == "CANCELLED"


@pytest.mark.parametrize(
    ("failure", "code"),
    [
        (TimeoutError("the store did not answer"), "internal_error"),
        (RedisConnectionError("Connection refused"), "dependency_unavailable"),
    ],
)
def test_a_streamed_run_whose_store_fails_ends_its_stream_with_an_error_event(
    client: TestClient, monkeypatch: pytest.MonkeyPatch, failure: Exception, code: str
) -> None:
    # The run's last save fails (a store timing out, Redis gone): the stream, whose status
    # line went out long ago, ends with an event saying so and where the run goes on, not cut
    # off without a word; the run is let go, and resumed from its last step.
    engine = client.app.state.services.engine  # type: ignore[attr-defined]
    put = engine.documents.put

    async def failing(kind: str, key: str, body: dict[str, Any], **kw: Any) -> None:
        if kw.get("status") not in (None, "RUNNING"):
            raise failure
        await put(kind, key, body, **kw)

    monkeypatch.setattr(engine.documents, "put", failing)
    body = {"inputs": {"order_id": "ORD1001"}, "stream": True}
    stream = client.post("/v1/workflows/refund-request/runs", json=body)
    assert stream.status_code == 200
    blocks = [b for b in stream.text.split("\n\n") if b.strip()]
    assert blocks[-1].startswith("event: error\n"), blocks[-1]
    last = json.loads(blocks[-1].split("data: ", 1)[1])
    run_id = last["run_id"]
    assert (last["type"], last["code"], last["url"]) == (
        "error",
        code,
        f"/v1/workflow-runs/{run_id}",
    )
    assert f"Workflow run {run_id} stopped" in last["message"]
    assert "goes on from its last step" in last["message"]
    assert [b for b in blocks if b.startswith("event: node_finished")]  # it had run
    monkeypatch.undo()
    assert client.get(f"/v1/workflow-runs/{run_id}").json()["status"] == "RUNNING"
    assert client.portal.call(engine.resume_orphans) == [run_id]  # type: ignore[union-attr]
    resumed = client.get(f"/v1/workflow-runs/{run_id}").json()
    assert resumed["status"] == "SUCCEEDED", resumed


def test_an_expert_node_makes_its_side_effects_anew_in_each_run_on_a_thread(
    model_settings: Any, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    # The node's calls were keyed by the thread and the node alone: a second run of the
    # workflow on the thread got the first run's work order back from the journal.
    workflows = tmp_path / "workflows"
    workflows.mkdir()
    (workflows / "open-order.yaml").write_text(
        "name: open-order\n"
        "description: Open a work order for a device.\n"
        "inputs:\n  device_id: {type: string}\n"
        "nodes:\n"
        "  - id: open\n    kind: expert\n    skill: work-order\n"
        '    prompt: "Open a work order for {{ inputs.device_id }}."\n'
        "outputs:\n  message: '{{ nodes.open.output }}'\n"
    )
    settings = model_settings.model_copy(
        update={"skills_dir": ROOT / "skills", "workflows_dir": workflows}
    )
    order = {
        "device_id": "PUMP-07",
        "title": "Seal leak",
        "description": "Replace the seal.",
        "priority": "high",
    }
    orders = []
    with TestClient(create_app(settings)) as client:
        for n in range(2):
            fake_llm.script(
                Reply(tool_calls=[ToolCall("create_work_order", order, id=f"call_{n}")]),
                Reply(content="Opened."),
            )
            body = {"inputs": {"device_id": "PUMP-07"}, "thread_id": "orders-1"}
            record = client.post("/v1/workflows/open-order/runs", json=body).json()
            assert record["status"] == "SUCCEEDED", record
            tool_result = fake_llm.requests[-1]["messages"][-1]
            assert tool_result["role"] == "tool"
            orders.append(json.loads(tool_result["content"]))
    assert [o["duplicate"] for o in orders] == [False, False]
    assert orders[0]["work_order_id"] != orders[1]["work_order_id"]  # two orders, two runs
    # The replies that asked for them were recorded, and deleted once each run ended.
    with sqlite3.connect(settings.data_dir / "skilldesk.sqlite") as conn:
        tools = conn.execute("SELECT tool, status FROM skilldesk_calls").fetchall()
    assert tools == [("create_work_order", "done")] * 2


def test_an_admin_reload_lists_every_workflow_refused_not_only_new_ones(
    model_settings: Any, tmp_path: Path
) -> None:
    # QA: the answer said "workflow_errors": [] when the folder's watcher had found the broken
    # file first (only problems a reload found anew were listed).
    folder = tmp_path / "workflows"
    folder.mkdir()
    (folder / "broken.yaml").write_text("name: broken\nnodes: [unclosed\n", encoding="utf-8")
    settings = model_settings.model_copy(
        update={"skills_dir": ROOT / "skills", "workflows_dir": folder}
    )
    with TestClient(create_app(settings)) as client:
        answers = [client.post("/v1/admin/reload").json() for _ in range(2)]
    for answer in answers:
        assert any("broken.yaml" in error for error in answer["workflow_errors"]), answer


def test_the_listing_names_every_problem_of_a_file_at_once(
    model_settings: Any, tmp_path: Path
) -> None:
    # QA: a node's unknown kind hid another's template, and that the unknown tool.
    folder = tmp_path / "workflows"
    folder.mkdir()
    (folder / "staged.yaml").write_text(
        "name: staged\n"
        "description: Three problems.\n"
        "nodes:\n"
        "  - {id: a, kind: tool, tool: no_such_tool}\n"
        '  - {id: b, kind: set, values: {y: "{{ nodes.zzz.output }}"}}\n'
        "  - {id: c, kind: bogus}\n",
        encoding="utf-8",
    )
    settings = model_settings.model_copy(
        update={"skills_dir": ROOT / "skills", "workflows_dir": folder}
    )
    with TestClient(create_app(settings)) as client:
        errors = client.get("/v1/workflows").json()["errors"]
    file = str(folder / "staged.yaml")
    assert [(e["file"], e["node"], e["line"], e["message"].split(":")[0]) for e in errors] == [
        (file, "a", 4, "tool"),
        (file, "b", 5, "values.y"),
        (file, "c", 6, "kind"),
    ]


def test_a_streamed_run_goes_on_to_its_end_when_its_client_goes_away(
    model_settings: Any, fake_llm: FakeLLM
) -> None:
    # The request drove the run: a client that went away stopped it where it was, RUNNING
    # until the service's next start looked for runs left (QA).
    fake_llm.script(Reply(content="Shipped on Monday; returnable.", delay=1.0))
    settings = model_settings.model_copy(
        update={"skills_dir": ROOT / "skills", "workflows_dir": ROOT / "workflows"}
    )
    body = {"inputs": {"order_id": "ORD1001"}, "stream": True}
    app = create_app(settings)
    with serving(settings, app) as url, httpx.Client(base_url=url, timeout=30) as http:
        with http.stream("POST", "/v1/workflows/order-overview/runs", json=body) as response:
            assert response.status_code == 200
            run_id = response.headers["X-Run-Id"]  # named at once, to be found again
            read_events(response.iter_lines(), stop_after=1)  # then the client goes away
        time.sleep(0.3)  # in its model call
        leases = app.state.services.engine.leases
        # Held by the task that drives it, not by the request that ended: a run whose task
        # ended is let go, and on PostgreSQL another process would run it at the same time.
        assert leases.holds(run_id)
        assert leases._abandoned() == []
        for _ in range(100):
            record = http.get(f"/v1/workflow-runs/{run_id}").json()
            if record["status"] != "RUNNING":
                break
            time.sleep(0.05)
    assert record["status"] == "SUCCEEDED", record
    assert len(fake_llm.requests) == 1  # its model call made once: the run was never cut
