"""Two service processes on one PostgreSQL database, one Redis and one data folder, as behind a
load balancer: a conversation alternates between them, a workflow started on one is approved
through the other, a file uploaded to one is served by the other, a thread deleted on one is
gone on both; a stream dropped on one is read on from the other, a run's status and cancel go
through the other, an admin reload reaches both, a stopping process hands its streams and runs
over, and a killed process's run is finished by the survivor."""

from __future__ import annotations

import json
import os
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.bundledkit import work_orders
from tests.fakellm import FakeLLM, Reply, ToolCall
from tests.integration.runs.test_runs_api import read_events
from tests.integration.test_server_process import Service
from tests.pgkit import REDIS, schema_url

ROOT = Path(__file__).resolve().parents[2]
WORDS = " ".join(f"word{i}" for i in range(40))


PairStarter = Callable[..., tuple[Service, Service]]


@pytest.fixture
def start_pair(fake_llm: FakeLLM, tmp_path: Path) -> Iterator[PairStarter]:
    """Two service processes on one PostgreSQL schema, one Redis prefix and one data folder;
    keyword arguments are more settings (``SKILLDESK_`` left out)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKILLDESK_")}
    env.update(
        SKILLDESK_REDIS_URL=REDIS,
        SKILLDESK_REDIS_PREFIX=f"test-{uuid.uuid4().hex[:12]}",  # its own keys and channel
        SKILLDESK_SKILLS_DIR=str(ROOT / "skills"),
        SKILLDESK_WORKFLOWS_DIR=str(ROOT / "workflows"),
        SKILLDESK_SKILLS_EMBEDDINGS="false",
        SKILLDESK_MODEL="openai/fake-model",
        SKILLDESK_MODEL_API_BASE=fake_llm.base_url,
        SKILLDESK_MODEL_API_KEY="sk-test",
        SKILLDESK_LOG_FORMAT="json",
    )
    data = tmp_path / "data"  # one folder both see (attachments, skills' data)
    started: list[Service] = []

    def start(**more: str) -> tuple[Service, Service]:
        both = {**env, **{f"SKILLDESK_{k.upper()}": v for k, v in more.items()}}
        started.append(Service(both, data))
        started.append(Service(both, data))
        return started[-2], started[-1]

    with schema_url() as url:
        env["SKILLDESK_CHECKPOINT_URL"] = url
        try:
            yield start
        finally:
            for service in reversed(started):
                if service.proc.poll() is None:
                    service.stop()


@pytest.fixture
def pair(start_pair: PairStarter) -> tuple[Service, Service]:
    return start_pair()


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


def test_a_retry_with_the_same_idempotency_key_on_the_other_process_gets_the_first_runs_answer(
    pair: tuple[Service, Service], fake_llm: FakeLLM
) -> None:
    a, b = pair
    fake_llm.script(Reply(content="Only once.", delay=1.5), Reply(content="Twice!"))
    fake_llm.allow_leftovers()  # "Twice!" is what a second run would have answered
    headers = {"X-Thread-Id": "idem", "Idempotency-Key": "order-42"}
    body: dict[str, Any] = {"model": "skilldesk", "messages": [{"role": "user", "content": "hi"}]}
    url = "/v1/chat/completions"
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(httpx.post, a.url + url, json=body, headers=headers, timeout=60)
        time.sleep(0.5)  # A answers it; the client gave up and tries again through B
        with httpx.stream(
            "POST", b.url + url, json={**body, "stream": True}, headers=headers, timeout=60
        ) as retried:
            assert retried.status_code == 200
            retried_run = retried.headers["X-Run-Id"]
            chunks = [
                json.loads(line[6:]) for line in retried.iter_lines() if line.startswith("data: {")
            ]
        answered = first.result()
    streamed = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    assert answered.json()["choices"][0]["message"]["content"] == streamed == "Only once."
    assert retried_run == answered.headers["X-Run-Id"]  # the stream names the run it reads
    assert {c["id"] for c in chunks} == {answered.json()["id"]}
    later = httpx.post(b.url + url, json=body, headers=headers, timeout=60)  # after it ended
    assert later.json()["choices"][0]["message"]["content"] == "Only once."
    assert later.headers["X-Run-Id"] == answered.headers["X-Run-Id"]
    assert len(fake_llm.requests) == 1  # one run, whichever process each try reached
    thread = httpx.get(f"{b.url}/v1/threads/idem").json()
    assert [m["content"] for m in thread["messages"]] == ["hi", "Only once."]


def test_a_run_retried_with_its_key_through_the_other_process_is_the_same_run(
    pair: tuple[Service, Service], fake_llm: FakeLLM
) -> None:
    a, b = pair
    fake_llm.script(Reply(content=WORDS, stream_chunk_delay=0.05), Reply(content="Twice!"))
    fake_llm.allow_leftovers()  # "Twice!" is what a second run would have answered
    headers = {"Idempotency-Key": "story-7"}
    body = {"message": "tell me a story", "stream": True}
    url = "/v1/threads/keyed/runs"
    with ThreadPoolExecutor(2) as pool, httpx.Client(timeout=60) as http:
        first = pool.submit(stream_from, http, "POST", a.url + url, json=body, headers=headers)
        time.sleep(0.5)
        retried_headers, retried = stream_from(
            http, "POST", b.url + url, json=body, headers=headers
        )
        first_headers, events = first.result()
    assert retried_headers["X-Run-Id"] == first_headers["X-Run-Id"]
    assert_whole(events)
    assert_whole(retried)  # the same run's events from the first, through Redis
    queued = httpx.post(b.url + url, json={**body, "stream": False}, headers=headers)
    assert queued.status_code == 202
    assert queued.json()["id"] == first_headers["X-Run-Id"]
    assert queued.json()["status"] == "succeeded"
    # runs/stream honours the key across processes too: the same run's events, from the first.
    for process in (a, b):
        with httpx.Client(timeout=60) as http:
            streamed_headers, streamed = stream_from(
                http,
                "POST",
                f"{process.url}{url}/stream",
                json={"message": body["message"]},
                headers=headers,
            )
        assert streamed_headers["X-Run-Id"] == first_headers["X-Run-Id"]
        assert_whole(streamed)
    # The key with another message is a mistake of the client's, said plainly, not answered.
    for process in (a, b):
        other = httpx.post(
            process.url + url, json={**body, "message": "another story"}, headers=headers
        )
        assert other.status_code == 409, other.text
        assert other.json()["error"]["code"] == "idempotency_key_reused"
    assert len(fake_llm.requests) == 1


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
    assert [approvals_waiting(s) for s in (a, b)] == [0, 0]  # A asked, B was told: none waits


def test_every_process_counts_every_approval_that_waits(pair: tuple[Service, Service]) -> None:
    a, b = pair
    started = httpx.post(
        f"{a.url}/v1/workflows/refund-request/runs",
        json={"inputs": {"order_id": "ORD1002"}},
        timeout=60,
    ).json()
    assert started["status"] == "WAITING"
    assert [approvals_waiting(s) for s in (a, b)] == [1, 1]
    approval = started["waiting"]["approval_id"]
    decided = httpx.post(
        f"{b.url}/v1/approvals/{approval}", json={"decision": "reject"}, timeout=60
    ).json()
    assert decided["status"] == "SUCCEEDED", decided
    assert [approvals_waiting(s) for s in (a, b)] == [0, 0]


def approvals_waiting(service: Service) -> float:
    """``skilldesk_approvals_waiting`` as ``service`` reports it to a scrape."""
    text = httpx.get(f"{service.url}/metrics").text
    return float(text.split("\nskilldesk_approvals_waiting ", 1)[1].split()[0])


def workflow_run(service: Service, status: str) -> dict[str, Any]:
    """The one workflow run ``service`` lists with ``status``, once there is one."""
    deadline = time.monotonic() + 30
    while True:
        runs = httpx.get(f"{service.url}/v1/workflow-runs", params={"status": status}).json()
        if runs["runs"] or time.monotonic() > deadline:
            (run,) = runs["runs"]
            return dict(run)
        time.sleep(0.1)


def test_a_process_that_starts_leaves_a_workflow_run_another_process_runs_alone(
    pair: tuple[Service, Service], fake_llm: FakeLLM
) -> None:
    a, b = pair
    fake_llm.script(Reply(content="Returnable for 30 days.", delay=6))
    with ThreadPoolExecutor(1) as pool:
        started = pool.submit(
            httpx.post,
            f"{b.url}/v1/workflows/order-overview/runs",
            json={"inputs": {"order_id": "ORD1002"}},
            timeout=60,
        )
        run_id = workflow_run(a, "RUNNING")["id"]  # B waits for the expert's answer
        a.restart()  # A's look at start-up finds B's run RUNNING, its lease alive
        time.sleep(1)
        record = started.result().json()
    assert record["id"] == run_id
    assert record["status"] == "SUCCEEDED", record
    assert "Returnable for 30 days." in record["outputs"]["message"]
    assert len(fake_llm.requests) == 1  # one model call: A did not run it again
    assert not [x for x in a.logs() if x.get("event") == "workflow.resuming"]
    assert httpx.get(f"{a.url}/v1/workflow-runs/{run_id}").json()["status"] == "SUCCEEDED"


def overview_waiting_for_the_model(
    a: Service, b: Service, fake_llm: FakeLLM, pool: ThreadPoolExecutor
) -> tuple[Any, str]:
    """An order overview started on A (its request in ``pool``), once A waits for the
    expert's answer: the request's future and the run's id (as B lists it)."""
    started = pool.submit(
        httpx.post,
        f"{a.url}/v1/workflows/order-overview/runs",
        json={"inputs": {"order_id": "ORD1002"}},
        timeout=60,
    )
    run_id = workflow_run(b, "RUNNING")["id"]
    while not fake_llm.requests:
        time.sleep(0.05)
    return started, run_id


def finished_by(service: Service, run_id: str) -> dict[str, Any]:
    """The run as ``service`` reports it, once it is no longer RUNNING (nobody asks it to
    go on: a process finds it), within 30 s."""
    deadline = time.monotonic() + 30
    while True:
        record: dict[str, Any] = httpx.get(f"{service.url}/v1/workflow-runs/{run_id}").json()
        if record["status"] != "RUNNING" or time.monotonic() > deadline:
            return record
        time.sleep(0.2)


def test_a_workflow_run_of_a_killed_process_is_finished_by_the_survivor(
    start_pair: PairStarter, fake_llm: FakeLLM
) -> None:
    a, b = start_pair(run_lease_s="2")  # the survivor looks every 2 s
    fake_llm.script(Reply(content="Too late.", delay=15), Reply(content="Returnable for 30 days."))
    with ThreadPoolExecutor(1) as pool:
        cut, run_id = overview_waiting_for_the_model(a, b, fake_llm, pool)
        a.proc.kill()
        a.proc.wait(timeout=20)
        with pytest.raises(httpx.HTTPError):
            cut.result()
    record = finished_by(b, run_id)  # the survivor finds the run and finishes it
    assert record["status"] == "SUCCEEDED", record
    assert "Returnable for 30 days." in record["outputs"]["message"]
    assert [x["run_id"] for x in b.logs() if x.get("event") == "workflow.resuming"] == [run_id]


def killable_env(fake_llm: FakeLLM, tmp_path: Path, **more: str) -> dict[str, str]:
    """The settings of service processes started one by one (one to be killed) on the
    bundled skills, no workflows; ``more`` settings (with ``SKILLDESK_``)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKILLDESK_")}
    env.update(
        SKILLDESK_SKILLS_DIR=str(ROOT / "skills"),
        SKILLDESK_WORKFLOWS_DIR=str(tmp_path / "no-workflows"),
        SKILLDESK_SKILLS_EMBEDDINGS="false",
        SKILLDESK_MODEL="openai/fake-model",
        SKILLDESK_MODEL_API_BASE=fake_llm.base_url,
        SKILLDESK_MODEL_API_KEY="sk-test",
        SKILLDESK_LOG_FORMAT="json",
        **more,
    )
    return env


def test_a_run_of_a_killed_process_is_finished_by_the_other(
    fake_llm: FakeLLM, tmp_path: Path
) -> None:
    # The survivor looks for orphaned runs every 2 s.
    env = killable_env(fake_llm, tmp_path, SKILLDESK_RUN_LEASE_S="2")
    data = tmp_path / "data"
    order = {
        "device_id": "PUMP-07",
        "title": "Replace bearing",
        "description": "Bearing wear on pump 7, vibration high.",
        "priority": "high",
    }
    call = Reply(tool_calls=[ToolCall("create_work_order", order)])
    with schema_url() as url:
        env["SKILLDESK_CHECKPOINT_URL"] = url
        survivor = Service(env, data)
        try:
            fake_llm.script(call)
            doomed = Service({**env, "SKILLDESK_FAILPOINTS": "tool.done=create_work_order"}, data)
            with pytest.raises(httpx.HTTPError):
                httpx.post(
                    f"{doomed.url}/v1/threads/pump/runs/stream",
                    json={
                        "message": "Open a work order for pump 7's bearing.",
                        "skill": "work-order",
                    },
                    timeout=60,
                )
            doomed.proc.wait(timeout=20)
            assert doomed.proc.returncode == -9
            # The reply asking for the call was recorded before it ran: acted on again.
            fake_llm.script(Reply(content="Work order opened for PUMP-07."))
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
    assert [m["role"] for m in thread["messages"]] == ["human", "ai", "tool", "ai"]
    assert thread["messages"][-1]["content"] == "Work order opened for PUMP-07."
    # Made once: the survivor's step replayed the journal.
    assert len(work_orders(orders["result"])) == 1


def test_a_killed_processs_run_is_finished_before_a_message_queued_in_the_other(
    fake_llm: FakeLLM, tmp_path: Path
) -> None:
    # QA: the message queued in the survivor took the thread as soon as the killed process's
    # lease was found gone, and answered; the killed run's message stayed unanswered for good.
    env = killable_env(fake_llm, tmp_path)
    data = tmp_path / "data"
    order = {"device_id": "PUMP-07", "title": "Replace bearing", "priority": "high"}
    fake_llm.script(
        Reply(tool_calls=[ToolCall("create_work_order", order)], delay=1.5),
        Reply(content="Work order opened for PUMP-07."),
        Reply(content="Answer two."),
    )
    with schema_url() as url:
        env["SKILLDESK_CHECKPOINT_URL"] = url
        survivor = Service(env, data)
        try:
            doomed = Service({**env, "SKILLDESK_FAILPOINTS": "tool.done=create_work_order"}, data)
            ask = {"message": "Open a work order for pump 7's bearing.", "skill": "work-order"}
            first = httpx.post(f"{doomed.url}/v1/threads/pump2/runs", json=ask, timeout=30)
            assert first.status_code == 202, first.text
            deadline = time.monotonic() + 20
            while not fake_llm.scripted_requests and time.monotonic() < deadline:
                time.sleep(0.05)  # the first run holds the thread, at its model call
            second = httpx.post(
                f"{survivor.url}/v1/threads/pump2/runs", json={"message": "second"}, timeout=30
            )
            assert second.status_code == 202, second.text
            doomed.proc.wait(timeout=20)
            assert doomed.proc.returncode == -9
            deadline = time.monotonic() + 30
            while True:
                thread = httpx.get(f"{survivor.url}/v1/threads/pump2").json()
                if len(thread.get("messages", [])) >= 6 or time.monotonic() > deadline:
                    break
                time.sleep(0.3)
        finally:
            survivor.stop()
    said = [(m["role"], m["content"]) for m in thread["messages"]]
    assert [role for role, _ in said] == ["human", "ai", "tool", "ai", "human", "ai"]
    assert said[3] == ("ai", "Work order opened for PUMP-07.")
    assert said[4:] == [("human", "second"), ("ai", "Answer two.")]


# --- Run events, status, cancels and reloads through Redis --------------------------------


def stream_from(
    http: httpx.Client, method: str, url: str, stop_after: int | None = None, **kwargs: Any
) -> tuple[httpx.Headers, list[dict[str, str]]]:
    """A request's headers and the events of its SSE answer (up to ``stop_after``)."""
    with http.stream(method, url, **kwargs) as response:
        assert response.status_code == 200, response.read()
        return response.headers, read_events(response.iter_lines(), stop_after)


def run_status(service: Service, thread: str, run_id: str, *statuses: str) -> dict[str, Any]:
    """The run as ``service`` reports it, once its status is one of ``statuses``."""
    deadline = time.monotonic() + 30
    while True:
        run: dict[str, Any] = httpx.get(f"{service.url}/v1/threads/{thread}/runs/{run_id}").json()
        if run.get("status") in statuses or time.monotonic() > deadline:
            return run
        time.sleep(0.05)


def assert_whole(events: list[dict[str, str]]) -> None:
    """Every event once, in order, to the end, with every word of the answer."""
    assert [int(e["id"]) for e in events] == list(range(1, len(events) + 1))
    assert events[-1]["event"] == "run_finished"
    tokens = "".join(json.loads(e["data"])["text"] for e in events if e["event"] == "token")
    assert tokens.split() == WORDS.split()


def test_a_client_that_drops_on_one_process_reads_the_rest_from_the_other_exactly_once(
    pair: tuple[Service, Service], fake_llm: FakeLLM
) -> None:
    a, b = pair
    fake_llm.script(Reply(content=WORDS, stream_chunk_delay=0.05))
    body = {"message": "tell me a story", "stream": True}
    with httpx.Client(timeout=60) as http:
        headers, before = stream_from(
            http, "POST", f"{a.url}/v1/threads/relay/runs", stop_after=5, json=body
        )
        run_id = headers["X-Run-Id"]
        assert headers["X-Thread-Id"] == "relay"
        assert headers["X-Request-ID"]
        running = http.get(f"{b.url}/v1/threads/relay/runs/{run_id}")
        assert running.json()["status"] == "running"  # B answers for the run A runs
        assert running.headers["X-Run-Id"] == run_id
        _, after = stream_from(
            http,
            "GET",
            f"{b.url}/v1/threads/relay/runs/{run_id}/stream",
            headers={"Last-Event-ID": before[-1]["id"]},
        )
    assert_whole(before + after)
    done = run_status(b, "relay", run_id, "succeeded")
    assert done["answer"] == WORDS
    assert done["events"] == len(before + after)
    joined = f"{b.url}/v1/threads/relay/runs/{run_id}/stream"  # read through Redis
    at_the_end = httpx.get(joined, headers={"Last-Event-ID": str(done["events"])})
    assert (at_the_end.status_code, at_the_end.text) == (200, "")
    past = httpx.get(joined, headers={"Last-Event-ID": str(done["events"] + 1)})
    assert past.status_code == 400, past.text
    assert past.json()["error"]["param"] == "Last-Event-ID"
    assert f"the last is {done['events']}" in past.json()["error"]["message"]
    # A's log lines of the run carry the request, thread and run ids.
    lines = [x for x in a.logs() if x.get("event") == "run.finished"]
    assert lines
    assert lines[0]["run_id"] == run_id
    assert lines[0]["thread_id"] == "relay"
    assert lines[0]["request_id"]


def test_a_cancel_sent_to_one_process_stops_the_run_on_the_other(
    pair: tuple[Service, Service], fake_llm: FakeLLM
) -> None:
    a, b = pair
    fake_llm.script(Reply(content=WORDS, stream_chunk_delay=0.1), Reply(content="Next answer."))
    started = httpx.post(f"{a.url}/v1/threads/halt/runs", json={"message": "a long story"})
    assert started.status_code == 202
    assert started.headers["X-Run-Id"] == started.json()["id"]
    run_id = started.json()["id"]
    assert run_status(b, "halt", run_id, "running")["status"] == "running"
    cancel = httpx.post(f"{b.url}/v1/threads/halt/runs/{run_id}/cancel")
    assert cancel.status_code == 200
    assert cancel.json()["cancel_requested"]
    for service in (a, b):
        ended = run_status(service, "halt", run_id, "cancelled", "succeeded", "failed")
        assert ended["status"] == "cancelled", ended
        assert ended["error"]["code"] == "run_cancelled_by_request"
    again = httpx.post(f"{b.url}/v1/threads/halt/runs/{run_id}/cancel")  # read through Redis
    assert again.status_code == 409, again.text
    assert again.json()["error"]["code"] == "run_not_active"
    assert "ended (cancelled)" in again.json()["error"]["message"]
    assert say(b, "halt", "and then?") == "Next answer."  # the thread goes on


def test_an_admin_reload_through_one_process_reaches_the_other(
    start_pair: PairStarter, tmp_path: Path
) -> None:
    skills = tmp_path / "skills"
    skills.mkdir()
    # Folders unwatched (a mount without change events): only the call reloads them.
    a, b = start_pair(
        skills_dir=str(skills), workflows_dir=str(tmp_path / "flows"), skills_watch="false"
    )
    folder = skills / "greeting-card"
    folder.mkdir()
    (folder / "SKILL.md").write_text(
        "---\nname: greeting-card\ndescription: Writes a short greeting card.\n---\n"
        "Write two warm lines.\n"
    )
    assert httpx.get(f"{b.url}/v1/skills/greeting-card").status_code == 404
    reloaded = httpx.post(f"{a.url}/v1/admin/reload", timeout=30)
    assert reloaded.status_code == 200, reloaded.text
    assert reloaded.json()["skills"] == ["greeting-card"]
    assert reloaded.json()["processes"] == 2
    deadline = time.monotonic() + 10
    while httpx.get(f"{b.url}/v1/skills/greeting-card").status_code != 200:
        assert time.monotonic() < deadline, "B never reloaded"
        time.sleep(0.1)


def test_a_stopping_process_ends_its_stream_with_reconnect_and_finishes_the_run(
    start_pair: PairStarter, fake_llm: FakeLLM
) -> None:
    a, b = start_pair(shutdown_grace_s="30")
    fake_llm.script(Reply(content=WORDS, stream_chunk_delay=0.08))
    body = {"message": "tell me a story", "stream": True}
    with httpx.Client(timeout=60) as http:
        with http.stream("POST", f"{a.url}/v1/threads/bye/runs", json=body) as first:
            run_id = first.headers["X-Run-Id"]
            lines = first.iter_lines()
            before = read_events(lines, stop_after=3)
            a.proc.send_signal(signal.SIGTERM)
            rest = read_events(lines)
        reconnect = rest.pop()
        assert reconnect["event"] == "reconnect"
        assert "id" not in reconnect
        told = json.loads(reconnect["data"])
        sent = before + rest
        assert told == {
            "thread_id": "bye",
            "run_id": run_id,
            "url": f"/v1/threads/bye/runs/{run_id}/stream",
            "last_event_id": sent[-1]["id"],
            "reason": "shutting_down",
        }
        assert sent[-1]["event"] != "run_finished"  # it ended before the run did
        # The load balancer sends the reconnect to the process still serving.
        _, after = stream_from(
            http, "GET", b.url + told["url"], headers={"Last-Event-ID": told["last_event_id"]}
        )
    assert_whole(sent + after)
    a.proc.wait(timeout=40)  # it finished the run in its grace period, then left
    assert [x["runs_cut_off"] for x in a.logs() if x.get("event") == "service.stopped"] == [0]
    assert [x["run_id"] for x in a.logs() if x.get("event") == "run.finished"] == [run_id]
    assert not [x for x in b.logs() if x.get("event") in ("run.started", "run.resumed")]


def test_a_run_a_stopping_process_cuts_off_is_resumed_by_the_other_and_its_reader_follows(
    start_pair: PairStarter, fake_llm: FakeLLM
) -> None:
    a, b = start_pair(shutdown_grace_s="1")  # leases of 30 s: only the hand-over is quick
    fake_llm.script(Reply(content="Too late.", delay=8), Reply(content="Resumed answer."))
    body = {"message": "hello", "stream": True}
    with httpx.Client(timeout=60) as http:
        with http.stream("POST", f"{a.url}/v1/threads/handover/runs", json=body) as first:
            run_id = first.headers["X-Run-Id"]
            lines = first.iter_lines()
            read_events(lines, stop_after=2)  # under way: A waits for the model
            time.sleep(0.5)
            stopped_at = time.monotonic()
            a.proc.send_signal(signal.SIGTERM)
            told = json.loads(read_events(lines)[-1]["data"])
        assert told["reason"] == "shutting_down"
        # Read on through B: the run A cut off ends with where it goes on, nothing else.
        _, moved = stream_from(
            http, "GET", b.url + told["url"], headers={"Last-Event-ID": told["last_event_id"]}
        )
        assert [e["event"] for e in moved] == ["reconnect"]
        onward = json.loads(moved[0]["data"])
        assert onward["reason"] == "resumed"
        assert onward["run_id"] != run_id
        assert onward["url"] == f"/v1/threads/handover/runs/{onward['run_id']}/stream"
        _, after = stream_from(
            http, "GET", b.url + onward["url"], headers={"Last-Event-ID": onward["last_event_id"]}
        )
    assert after[-1]["event"] == "run_finished"
    assert "".join(json.loads(e["data"])["text"] for e in after if e["event"] == "token") == (
        "Resumed answer."
    )
    a.proc.wait(timeout=20)
    assert [x["runs_cut_off"] for x in a.logs() if x.get("event") == "service.stopped"] == [1]
    ended = run_status(b, "handover", run_id, "failed")  # as B wrote it on resuming
    assert ended["error"]["code"] == "run_cancelled"
    assert ended["resumed_as"] == onward["run_id"]
    messages = httpx.get(f"{b.url}/v1/threads/handover").json().get("messages", [])
    assert [m["content"] for m in messages] == ["hello", "Resumed answer."]
    assert time.monotonic() - stopped_at < 15  # not the 30 s of a lease expiring
    assert [x for x in b.logs() if x.get("event") == "run.resumed"]


def test_a_workflow_run_a_stopping_process_cuts_off_is_handed_to_the_other_at_once(
    start_pair: PairStarter, fake_llm: FakeLLM
) -> None:
    # A run started by a request that waits for its record (not streamed), still going when
    # the grace period ends: its client is told where the run goes on, its lease is let go
    # while the store is still open, and the other process resumes it at once (not when the
    # lease of 30 s expires). Was: a plain 500, `workflow.lease_release_failed` (the pool had
    # closed first), the run taken over 23-26 s later.
    a, b = start_pair(shutdown_grace_s="1")
    fake_llm.script(Reply(content="Too late.", delay=8), Reply(content="Returnable for 30 days."))
    with ThreadPoolExecutor(1) as pool:
        cut, run_id = overview_waiting_for_the_model(a, b, fake_llm, pool)
        stopped_at = time.monotonic()
        a.proc.send_signal(signal.SIGTERM)
        answer = cut.result()
    assert answer.status_code == 503, answer.text
    error = answer.json()["error"]
    assert error["code"] == "shutting_down"
    assert f"/v1/workflow-runs/{run_id}" in error["message"]
    # QA: told apart from a 503 to send again only by its words (a retry: a second run).
    assert answer.headers["X-Run-Id"] == run_id
    assert answer.headers["X-Should-Retry"] == "false"
    record = finished_by(b, run_id)  # the other process was told and finishes the run
    assert record["status"] == "SUCCEEDED", record
    assert "Returnable for 30 days." in record["outputs"]["message"]
    assert time.monotonic() - stopped_at < 15  # not the 30 s of a lease expiring
    a.proc.wait(timeout=20)
    assert not [x for x in a.logs() if x.get("event") == "workflow.lease_release_failed"]
    stopped = [x for x in a.logs() if x.get("event") == "service.stopped"]
    assert [x.get("workflow_runs_cut_off") for x in stopped] == [1]
    assert [x["run_id"] for x in b.logs() if x.get("event") == "workflow.resuming"] == [run_id]


def streamed_events(url: str, body: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Every event of a Server-Sent Events response to POST ``url``, to its end."""
    events: list[tuple[str, dict[str, Any]]] = []
    with httpx.stream("POST", url, json=body, timeout=60) as response:
        assert response.status_code == 200, response.read()
        kind = ""
        for line in response.iter_lines():
            if line.startswith("event: "):
                kind = line[7:]
            elif line.startswith("data: "):
                events.append((kind, json.loads(line[6:])))
    return events


def test_a_streamed_workflow_run_a_stopping_process_cuts_off_ends_saying_where_it_goes_on(
    start_pair: PairStarter, fake_llm: FakeLLM
) -> None:
    # Its stream just ended when uvicorn cut the request off at the grace period's end: no
    # event said what became of the run. Now the stream lets the run go a moment before
    # and ends with `handed_over`; the other process is told and finishes the run at once.
    a, b = start_pair(shutdown_grace_s="1")
    fake_llm.script(Reply(content="Too late.", delay=8), Reply(content="Returnable for 30 days."))
    body = {"inputs": {"order_id": "ORD1002"}, "stream": True}
    with ThreadPoolExecutor(1) as pool:
        cut = pool.submit(streamed_events, f"{a.url}/v1/workflows/order-overview/runs", body)
        run_id = workflow_run(b, "RUNNING")["id"]
        while not fake_llm.requests:
            time.sleep(0.05)
        stopped_at = time.monotonic()
        a.proc.send_signal(signal.SIGTERM)
        events = cut.result()
    kind, last = events[-1]
    assert kind == "handed_over", events
    assert last["run_id"] == run_id
    assert last["url"] == f"/v1/workflow-runs/{run_id}"
    assert last["reason"] == "shutting_down"
    assert "workflow_ended" not in [k for k, _ in events]
    record = finished_by(b, run_id)
    assert record["status"] == "SUCCEEDED", record
    assert "Returnable for 30 days." in record["outputs"]["message"]
    assert time.monotonic() - stopped_at < 15  # not the 30 s of a lease expiring
    a.proc.wait(timeout=20)
    assert not [x for x in a.logs() if x.get("event") == "workflow.lease_release_failed"]
    assert [x["run_id"] for x in b.logs() if x.get("event") == "workflow.resuming"] == [run_id]


def test_a_run_queued_in_a_killed_process_is_reported_failed_by_the_other(
    start_pair: PairStarter, fake_llm: FakeLLM
) -> None:
    # It said `queued` through the survivor for an hour (its Redis status's time to live),
    # and a reader of its stream there waited as long: no process was left to end it.
    a, b = start_pair(run_lease_s="2")
    fake_llm.script(Reply(content="The first answer.", delay=8), Reply(content="The second."))
    first = httpx.post(f"{b.url}/v1/threads/q/runs", json={"message": "first"}).json()
    assert run_status(b, "q", first["id"], "running")["status"] == "running"
    keyed = {"Idempotency-Key": "second-try"}
    queued = httpx.post(f"{a.url}/v1/threads/q/runs", json={"message": "second"}, headers=keyed)
    assert queued.status_code == 202, queued.text
    run_id = queued.json()["id"]
    time.sleep(3)  # longer than the lease: its process, alive, keeps it queued
    assert run_status(b, "q", run_id, "queued")["status"] == "queued"
    a.proc.kill()
    a.proc.wait(timeout=20)
    killed = time.monotonic()
    deadline = killed + 15
    while True:
        run = httpx.get(f"{b.url}/v1/threads/q/runs/{run_id}").json()
        if run["status"] != "queued" or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert run["status"] == "failed", run
    assert run["started"] is None
    assert run["error"]["code"] == "run_cancelled"
    assert "send it again" in run["error"]["message"]
    assert time.monotonic() - killed < 6  # the lease's time (2 s), not an hour
    with httpx.Client(timeout=10) as http:  # its stream, read through the survivor, ends
        _, events = stream_from(http, "GET", f"{b.url}/v1/threads/q/runs/{run_id}/stream")
    assert [e["event"] for e in events] == ["run_failed"]
    assert run_status(b, "q", first["id"], "succeeded")["answer"] == "The first answer."
    # Sent again with its key, as the error says: a new run answers it (it got the failed
    # run back for an hour, the key's run, which never began); sent once more, the same run.
    again = httpx.post(f"{b.url}/v1/threads/q/runs", json={"message": "second"}, headers=keyed)
    assert again.status_code == 202, again.text
    assert again.json()["id"] != run_id
    assert run_status(b, "q", again.json()["id"], "succeeded")["answer"] == "The second."
    once_more = httpx.post(
        f"{b.url}/v1/threads/q/runs", json={"message": "second"}, headers=keyed
    ).json()
    assert once_more["id"] == again.json()["id"]
    assert len(fake_llm.requests) == 2
