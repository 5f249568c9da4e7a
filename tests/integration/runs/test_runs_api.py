"""Runs as resources: start one and read its status, one run per thread (409 or queued),
cancel one (queued: at once; running: at its next step, the thread still valid), join its
events, and a plain httpx SSE consumer that disconnects and reconnects with Last-Event-ID
gets every event exactly once, in order, from a real server."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from tests.contract import sse_events
from tests.fakellm import FakeLLM, Reply
from tests.servekit import read_events, serving

WORDS = " ".join(f"word{i}" for i in range(30))


@pytest.fixture
def client(model_settings: Any) -> Iterator[TestClient]:
    with TestClient(create_app(model_settings)) as test_client:
        yield test_client


def wait_for(client: Any, thread: str, run_id: str, *statuses: str) -> dict[str, Any]:
    """The run once its status is one of ``statuses``."""
    for _ in range(400):
        run = client.get(f"/v1/threads/{thread}/runs/{run_id}").json()
        if run["status"] in statuses:
            return dict(run)
        time.sleep(0.025)
    raise AssertionError(f"run {run_id} is still {run['status']}")


def start(client: Any, thread: str, message: str, **more: Any) -> dict[str, Any]:
    made = client.post(f"/v1/threads/{thread}/runs", json={"message": message, **more})
    assert made.status_code == 202, made.text
    return dict(made.json())


def test_a_run_is_started_at_once_and_read_until_it_succeeds(
    client: TestClient, fake_llm: FakeLLM
) -> None:
    fake_llm.script(Reply(content="It ships today.", delay=0.3))
    run = start(client, "r-1", "where is my order?")
    assert run["status"] in ("queued", "running")
    done = wait_for(client, "r-1", run["id"], "succeeded")
    assert done["answer"] == "It ships today."
    assert done["events"] >= 2
    assert done["usage"]["model_calls"] == 1
    assert done["usage"]["total_tokens"] > 0
    messages = client.get("/v1/threads/r-1").json()["messages"]
    assert [m["content"] for m in messages] == ["where is my order?", "It ships today."]


def test_a_second_run_is_rejected_or_queued_as_asked_never_interleaved(
    client: TestClient, fake_llm: FakeLLM
) -> None:
    fake_llm.script(Reply(content="First answer.", delay=2.0), Reply(content="Second answer."))
    first = start(client, "r-2", "first")
    wait_for(client, "r-2", first["id"], "running")
    refused = client.post("/v1/threads/r-2/runs", json={"message": "second", "if_busy": "reject"})
    assert refused.status_code == 409
    assert refused.json()["error"]["code"] == "thread_busy"
    queued = start(client, "r-2", "second", if_busy="enqueue")
    assert queued["status"] == "queued"
    wait_for(client, "r-2", queued["id"], "succeeded")
    messages = [m["content"] for m in client.get("/v1/threads/r-2").json()["messages"]]
    assert messages == ["first", "First answer.", "second", "Second answer."]


def test_a_queued_run_cancelled_never_runs(client: TestClient, fake_llm: FakeLLM) -> None:
    # The first answer takes 2 s, so the cancel comes while the second run is still queued
    # on a slow machine (CI: with 0.5 s the first had ended and the second begun).
    fake_llm.script(Reply(content="Only answer.", delay=2.0))
    first = start(client, "r-3", "first")
    queued = start(client, "r-3", "second")
    cancelled = client.post(f"/v1/threads/r-3/runs/{queued['id']}/cancel")
    assert cancelled.status_code == 200
    assert wait_for(client, "r-3", queued["id"], "cancelled")["error"]["code"] == (
        "run_cancelled_by_request"
    )
    wait_for(client, "r-3", first["id"], "succeeded")
    messages = [m["content"] for m in client.get("/v1/threads/r-3").json()["messages"]]
    assert messages == ["first", "Only answer."]


def test_a_running_run_stops_at_its_next_step_and_the_thread_goes_on(
    client: TestClient, fake_llm: FakeLLM
) -> None:
    fake_llm.script(Reply(content=WORDS, stream_chunk_delay=0.03), Reply(content="Next answer."))
    run = start(client, "r-4", "tell me a long story")
    with client.stream("GET", f"/v1/threads/r-4/runs/{run['id']}/stream") as events:
        next(line for line in events.iter_lines() if line == "event: token")  # mid-answer
    assert client.post(f"/v1/threads/r-4/runs/{run['id']}/cancel").json()["cancel_requested"]
    ended = wait_for(client, "r-4", run["id"], "cancelled", "succeeded", "failed")
    assert ended["status"] == "cancelled"
    # The thread is valid: the next message runs on it.
    after = start(client, "r-4", "and then?")
    assert wait_for(client, "r-4", after["id"], "succeeded")["answer"] == "Next answer."
    history = client.get("/v1/threads/r-4/history")
    assert history.status_code == 200


def test_a_run_that_is_not_under_way_is_not_cancelled_and_the_answer_names_its_status(
    client: TestClient, fake_llm: FakeLLM
) -> None:
    fake_llm.script(Reply(content="First answer.", delay=0.5))
    first = start(client, "r-7", "first")
    queued = start(client, "r-7", "second")
    cancel = f"/v1/threads/r-7/runs/{queued['id']}/cancel"
    assert client.post(cancel).status_code == 200  # queued: taken
    wait_for(client, "r-7", queued["id"], "cancelled")
    again = client.post(cancel)  # a cancel of a run that ended changes nothing, and says so
    assert again.status_code == 409, again.text
    error = again.json()["error"]
    assert error["code"] == "run_not_active"
    assert "ended (cancelled)" in error["message"]
    wait_for(client, "r-7", first["id"], "succeeded")
    refused = client.post(f"/v1/threads/r-7/runs/{first['id']}/cancel")
    assert refused.status_code == 409, refused.text
    assert "ended (succeeded)" in refused.json()["error"]["message"]
    after = client.get(f"/v1/threads/r-7/runs/{first['id']}").json()
    assert (after["status"], after["cancel_requested"]) == ("succeeded", False)


def test_a_last_event_id_past_the_runs_events_is_a_bad_request_naming_the_last(
    client: TestClient, fake_llm: FakeLLM
) -> None:
    fake_llm.script(Reply(content="Hi."))
    run = start(client, "r-8", "hi")
    done = wait_for(client, "r-8", run["id"], "succeeded")
    url, last = f"/v1/threads/r-8/runs/{run['id']}/stream", done["events"]
    past = client.get(url, headers={"Last-Event-ID": str(last + 1)})
    assert past.status_code == 400, past.text
    error = past.json()["error"]
    assert (error["code"], error["param"]) == ("invalid_request", "Last-Event-ID")
    assert f"Last-Event-ID {last + 1} is past" in error["message"]
    assert f"the last is {last}" in error["message"]
    at_the_end = client.get(url, headers={"Last-Event-ID": str(last)})  # nothing more to read
    assert (at_the_end.status_code, at_the_end.text) == (200, "")
    [final] = sse_events(client.get(url, headers={"Last-Event-ID": str(last - 1)}).text)
    assert (final["event"], final["id"]) == ("run_finished", str(last))
    garbled = client.get(url, headers={"Last-Event-ID": "abc"})  # was read as 0: all again
    assert garbled.status_code == 400, garbled.text
    assert garbled.json()["error"]["param"] == "Last-Event-ID"


def test_responses_carry_the_request_thread_and_run_ids(
    client: TestClient, fake_llm: FakeLLM
) -> None:
    fake_llm.script(Reply(content="Hi."), Reply(content="Hello."))
    made = client.post("/v1/threads/ids-1/runs", json={"message": "hi"})
    run_id = made.json()["id"]
    assert made.headers["X-Run-Id"] == run_id
    assert made.headers["X-Thread-Id"] == "ids-1"
    wait_for(client, "ids-1", run_id, "succeeded")
    read = client.get(f"/v1/threads/ids-1/runs/{run_id}", headers={"X-Request-ID": "req-42"})
    assert read.headers["X-Request-ID"] == "req-42"  # echoed
    assert read.headers["X-Thread-Id"] == "ids-1"
    assert read.headers["X-Run-Id"] == run_id
    thread = client.get("/v1/threads/ids-1", headers={"X-Request-ID": "not one\tto log"})
    assert thread.headers["X-Request-ID"] != "not one\tto log"  # replaced by one made here
    assert len(thread.headers["X-Request-ID"]) == 32
    assert "X-Run-Id" not in thread.headers
    chat = client.post(
        "/v1/chat/completions",
        json={"model": "skilldesk", "messages": [{"role": "user", "content": "hello"}]},
        headers={"X-Thread-Id": "ids-2"},
    )
    assert chat.headers["X-Thread-Id"] == "ids-2"
    assert len(chat.headers["X-Run-Id"]) == 36


def test_a_streamed_chat_completion_names_its_run_as_the_answer_does(
    client: TestClient, fake_llm: FakeLLM
) -> None:
    fake_llm.script(Reply(content="Hi."), Reply(content="Hello again."))
    url, user = "/v1/chat/completions", {"role": "user", "content": "hello"}
    answered = client.post(url, json={"messages": [user]}, headers={"X-Thread-Id": "ids-3"})
    assert answered.json()["id"] == f"chatcmpl-{answered.headers['X-Run-Id']}"
    streamed = client.post(
        url,
        json={"messages": [{"role": "user", "content": "and?"}], "stream": True},
        headers={"X-Thread-Id": "ids-3"},
    )
    assert streamed.status_code == 200, streamed.text
    run_id = streamed.headers["X-Run-Id"]
    assert run_id != answered.headers["X-Run-Id"]
    chunks = [json.loads(e["data"]) for e in sse_events(streamed.text) if e["data"] != "[DONE]"]
    assert {c["id"] for c in chunks} == {f"chatcmpl-{run_id}"}
    # The id is the run's: its status and its answer are found by it.
    assert wait_for(client, "ids-3", run_id, "succeeded")["answer"] == "Hello again."


@pytest.mark.parametrize(
    ("path", "body", "code", "param"),
    [
        ("/v1/threads/lax/runs", {"message": "x" * 100_001}, "message_too_long", "message"),
        ("/v1/threads/lax/runs", {"message": "hi", "stream": "yes"}, "invalid_request", "stream"),
        ("/v1/threads/lax/runs", {"message": 5}, "invalid_request", "message"),
        ("/v1/threads/lax/fork", {"before_message": "2"}, "invalid_request", "before_message"),
        ("/v1/threads/lax/fork", {"before_message": True}, "invalid_request", "before_message"),
        ("/v1/workflows/none/runs", {"inputs": {}, "stream": "yes"}, "invalid_request", "stream"),
    ],
)
def test_a_value_of_the_wrong_type_is_refused_not_read_as_another(
    client: TestClient, path: str, body: dict[str, Any], code: str, param: str
) -> None:
    # QA: "2" was read as 2, true as 1 and "yes" as true; an over-long message had no code.
    refused = client.post(path, json=body)
    assert refused.status_code == 400, refused.text
    error = refused.json()["error"]
    assert (error["code"], error["param"]) == (code, param)


def test_a_message_that_is_not_text_says_what_it_must_be_and_what_came(
    client: TestClient, fake_llm: FakeLLM
) -> None:
    # QA: pydantic's "message: Input should be a valid string", not saying what was sent.
    for path in ("/v1/threads/t-5/runs", "/v1/threads/t-5/runs/stream"):
        for sent, given in ((5, "a number"), (["hi"], "a list"), (True, "a boolean")):
            error = client.post(path, json={"message": sent}).json()["error"]
            assert error["message"] == f"Invalid request: message must be a string, not {given}"
            assert (error["code"], error["param"]) == ("invalid_request", "message")
    assert fake_llm.requests == []


def test_an_unknown_run_or_one_of_another_thread_is_not_found(
    client: TestClient, fake_llm: FakeLLM
) -> None:
    fake_llm.script(Reply(content="Hi."))
    run = start(client, "r-5", "hi")
    wait_for(client, "r-5", run["id"], "succeeded")
    client.post("/v1/threads", json={"thread_id": "r-6"})
    assert client.get(f"/v1/threads/r-6/runs/{run['id']}").status_code == 404
    missing = "00000000-0000-0000-0000-000000000000"
    assert client.get(f"/v1/threads/r-5/runs/{missing}").status_code == 404
    assert client.post(f"/v1/threads/r-5/runs/{missing}/cancel").status_code == 404


# --- A real server, a plain httpx consumer ---------------------------------------------


@pytest.fixture
def server(model_settings: Any) -> Iterator[str]:
    """The app served by uvicorn on a free port (keep-alives every 0.2 s)."""
    with serving(model_settings.model_copy(update={"sse_keepalive_s": 0.2})) as url:
        yield url


def test_a_consumer_that_reconnects_with_last_event_id_gets_every_event_once_in_order(
    server: str, fake_llm: FakeLLM
) -> None:
    fake_llm.script(Reply(content=WORDS, stream_chunk_delay=0.04))
    body = {"message": "tell me a story", "stream": True}
    with httpx.Client(base_url=server, timeout=30) as http:
        with http.stream("POST", "/v1/threads/sse-1/runs", json=body) as first:
            assert first.status_code == 200
            run_id = first.headers["X-Run-Id"]
            before = read_events(first.iter_lines(), stop_after=5)  # then the client goes away
        last = before[-1]["id"]
        headers = {"Last-Event-ID": last}
        with http.stream(
            "GET", f"/v1/threads/sse-1/runs/{run_id}/stream", headers=headers
        ) as again:
            assert again.status_code == 200
            after = read_events(again.iter_lines())
        whole = http.get(f"/v1/threads/sse-1/runs/{run_id}/stream").text
    got = before + after
    assert [int(e["id"]) for e in got] == list(range(1, len(got) + 1))  # once each, in order
    assert got[-1]["event"] == "run_finished"
    assert [e["id"] for e in sse_events(whole)] == [e["id"] for e in got]  # nothing else
    tokens = "".join(json.loads(e["data"])["text"] for e in got if e["event"] == "token")
    assert tokens.split() == WORDS.split()


def test_an_idle_stream_gets_keep_alive_comments(server: str, fake_llm: FakeLLM) -> None:
    fake_llm.script(Reply(content="Late.", delay=1.0))
    with httpx.Client(base_url=server, timeout=30) as http:
        body = {"message": "slow", "stream": True}
        text = http.post("/v1/threads/sse-2/runs", json=body).text
    assert ": keep-alive" in text
    assert sse_events(text.replace(": keep-alive\n\n", ""))[-1]["event"] == "run_finished"


def test_a_run_goes_on_when_its_client_leaves_unless_asked_to_cancel(
    server: str, fake_llm: FakeLLM
) -> None:
    fake_llm.script(
        Reply(content=WORDS, stream_chunk_delay=0.03), Reply(content=WORDS, stream_chunk_delay=0.03)
    )
    fake_llm.allow_leftovers()  # the cancelled run may stop before its model call
    with httpx.Client(base_url=server, timeout=30) as http:
        ids = {}
        for thread, cancel in (("sse-3", False), ("sse-4", True)):
            body = {"message": "story", "stream": True, "cancel_on_disconnect": cancel}
            with http.stream("POST", f"/v1/threads/{thread}/runs", json=body) as response:
                ids[thread] = response.headers["X-Run-Id"]
                read_events(response.iter_lines(), stop_after=3)
        kept = wait_for(http, "sse-3", ids["sse-3"], "succeeded", "cancelled", "failed")
        dropped = wait_for(http, "sse-4", ids["sse-4"], "succeeded", "cancelled", "failed")
    assert kept["status"] == "succeeded"
    assert dropped["status"] == "cancelled"
