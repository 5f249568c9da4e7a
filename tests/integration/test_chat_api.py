"""POST /v1/chat/completions in-process: answers, streams, threads, errors."""

from __future__ import annotations

import gc
import json
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from structlog.testing import capture_logs

from app.main import create_app
from tests.fakellm import FakeLLM, Reply

USER = {"role": "user", "content": "Where is my order?"}


@pytest.fixture
def client(model_settings: Any) -> Iterator[TestClient]:
    with TestClient(create_app(model_settings)) as test_client:
        yield test_client


def sse_payloads(text: str) -> list[Any]:
    lines = [line.removeprefix("data: ") for line in text.splitlines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    return [json.loads(line) for line in lines[:-1]]


def test_non_streamed_answer_comes_from_the_model(client: TestClient, fake_llm: FakeLLM) -> None:
    fake_llm.script(
        Reply(
            content="It ships today.",
            usage={"prompt_tokens": 30, "completion_tokens": 4, "total_tokens": 34},
        )
    )
    response = client.post("/v1/chat/completions", json={"model": "any", "messages": [USER]})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["object"] == "chat.completion"
    assert body["choices"][0]["message"] == {"role": "assistant", "content": "It ships today."}
    assert body["usage"] == {"prompt_tokens": 30, "completion_tokens": 4, "total_tokens": 34}
    assert response.headers["X-Thread-Id"]
    sent = fake_llm.requests[0]["messages"]
    assert sent[0]["role"] == "system"
    assert "Skilldesk" in sent[0]["content"]
    assert sent[-1] == USER


def test_streamed_answer_is_openai_chunks_with_usage(client: TestClient, fake_llm: FakeLLM) -> None:
    # Pieces the model sends apart reach the client apart (those of one read are joined).
    fake_llm.script(Reply(content="It ships today, by courier.", stream_chunk_delay=0.02))
    response = client.post(
        "/v1/chat/completions",
        json={"messages": [USER], "stream": True, "stream_options": {"include_usage": True}},
    )
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    payloads = sse_payloads(response.text)
    assert all(p["object"] == "chat.completion.chunk" for p in payloads)
    pieces = [p["choices"][0]["delta"].get("content") for p in payloads if p["choices"]]
    assert len([p for p in pieces if p]) >= 3
    assert "".join(p or "" for p in pieces) == "It ships today, by courier."
    assert payloads[-2]["choices"][0]["finish_reason"] == "stop"
    assert payloads[-1]["choices"] == []
    assert payloads[-1]["usage"]["total_tokens"] > 0


def test_usage_chunk_only_when_asked(client: TestClient, fake_llm: FakeLLM) -> None:
    fake_llm.script(Reply(content="ok"))
    response = client.post("/v1/chat/completions", json={"messages": [USER], "stream": True})
    assert all("usage" not in p for p in sse_payloads(response.text))


def test_same_thread_id_continues_the_conversation(client: TestClient, fake_llm: FakeLLM) -> None:
    fake_llm.script(Reply(content="Order ORD1 is packed."), Reply(content="Tomorrow."))
    headers = {"X-Thread-Id": "thread-42"}
    client.post("/v1/chat/completions", json={"messages": [USER]}, headers=headers)
    follow_up = {"role": "user", "content": "When will it arrive?"}
    response = client.post("/v1/chat/completions", json={"messages": [follow_up]}, headers=headers)
    assert response.json()["choices"][0]["message"]["content"] == "Tomorrow."
    seen = [(m["role"], m["content"]) for m in fake_llm.requests[1]["messages"][1:]]
    assert seen == [
        ("user", USER["content"]),
        ("assistant", "Order ORD1 is packed."),
        ("user", "When will it arrive?"),
    ]


def test_client_resending_full_history_is_not_duplicated(
    client: TestClient, fake_llm: FakeLLM
) -> None:
    fake_llm.script(Reply(content="Packed."), Reply(content="Tomorrow."))
    headers = {"X-Thread-Id": "full-history"}
    system = {"role": "system", "content": "Be terse."}
    client.post("/v1/chat/completions", json={"messages": [system, USER]}, headers=headers)
    messages = [
        system,
        USER,
        {"role": "assistant", "content": "Packed."},
        {"role": "user", "content": "When?"},
    ]
    client.post("/v1/chat/completions", json={"messages": messages}, headers=headers)
    roles = [m["role"] for m in fake_llm.requests[1]["messages"]]
    assert roles == ["system", "system", "user", "assistant", "user"]


def test_without_thread_id_requests_are_independent(client: TestClient, fake_llm: FakeLLM) -> None:
    fake_llm.script(Reply(content="one"), Reply(content="two"))
    first = client.post("/v1/chat/completions", json={"messages": [USER]})
    second = client.post("/v1/chat/completions", json={"messages": [USER]})
    assert first.headers["X-Thread-Id"] != second.headers["X-Thread-Id"]
    assert len(fake_llm.requests[1]["messages"]) == 2  # system + this user message only


def test_model_failure_is_an_openai_error_and_the_service_keeps_serving(
    client: TestClient, fake_llm: FakeLLM
) -> None:
    said = "upstream exploded: key sk-te** internal trace id 42"
    fake_llm.script(*[Reply(status=500, error_message=said)] * 3)
    headers = {"X-Thread-Id": "failing"}
    with capture_logs() as logs:
        response = client.post("/v1/chat/completions", json={"messages": [USER]}, headers=headers)
    assert response.status_code == 502
    error = response.json()["error"]
    assert error["code"] == "model_unavailable"
    # QA: the chat's user read the provider's words (a key's first characters, its trace
    # ids) and the operator's settings; they read what happened, the operator's log the rest.
    assert "try again" in error["message"]
    assert "sk-te" not in response.text
    assert "trace id" not in response.text
    assert "profiles tried" not in error["message"].lower()
    logged = [e for e in logs if e["event"] == "model.failed"]
    assert [e["code"] for e in logged] == ["model_unavailable"]
    assert said in logged[0]["detail"]
    assert "Profiles tried: 'default'" in logged[0]["detail"]
    # Nothing is lost: the next turn on the same thread still carries the first question.
    fake_llm.script(Reply(content="Back again."))
    again = {"role": "user", "content": "Are you there?"}
    response = client.post("/v1/chat/completions", json={"messages": [again]}, headers=headers)
    assert response.status_code == 200
    contents = [m["content"] for m in fake_llm.requests[-1]["messages"]]
    assert USER["content"] in contents
    assert "Are you there?" in contents


def test_an_empty_answer_is_a_model_error_and_is_not_stored(
    client: TestClient, fake_llm: FakeLLM
) -> None:
    # A model that answers with nothing (no text, no tool call): before, a 200 with "" and an
    # empty assistant message in the thread.
    fake_llm.script(Reply(content=""))
    headers = {"X-Thread-Id": "empty"}
    response = client.post("/v1/chat/completions", json={"messages": [USER]}, headers=headers)
    assert response.status_code == 502, response.text
    error = response.json()["error"]
    assert error["code"] == "model_bad_reply"
    assert "empty answer" in error["message"]
    assert "your message is kept" in error["message"]
    messages = client.get("/v1/threads/empty").json()["messages"]
    assert [(m["role"], m["content"]) for m in messages] == [("human", USER["content"])]
    fake_llm.script(Reply(content="Here now."))
    again = client.post("/v1/chat/completions", json={"messages": [USER]}, headers=headers)
    assert again.json()["choices"][0]["message"]["content"] == "Here now."


@pytest.mark.parametrize("stream", [False, True])
def test_a_failed_turn_says_which_thread_keeps_the_message(
    client: TestClient, fake_llm: FakeLLM, stream: bool
) -> None:
    # QA: the error came without X-Thread-Id, and a client that named no thread could not
    # find the thread made for it (its message kept there); the listing counted 0 messages.
    fake_llm.script(Reply(status=400, error_message="bad request"))
    response = client.post("/v1/chat/completions", json={"messages": [USER], "stream": stream})
    assert response.status_code == 502
    assert response.json()["error"]["type"] == "model_error"
    thread_id = response.headers["X-Thread-Id"]
    assert thread_id.startswith("thr_")  # as every thread the service names
    assert response.headers["X-Run-Id"]
    thread = client.get(f"/v1/threads/{thread_id}").json()
    assert [m["content"] for m in thread["messages"]] == [USER["content"]]
    listed = {t["thread_id"]: t for t in client.get("/v1/threads").json()["data"]}
    assert (listed[thread_id]["status"], listed[thread_id]["messages"]) == ("failed", 1)


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "robot", "content": "hi"}]}, "messages.0.role"),
        ({"stream": True}, "messages"),
    ],
)
def test_malformed_request_names_the_field(
    client: TestClient, fake_llm: FakeLLM, body: dict[str, Any], param: str
) -> None:
    response = client.post("/v1/chat/completions", json=body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == param
    assert error["code"] == "invalid_request"
    assert param in error["message"]
    assert fake_llm.requests == []


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (5, "messages.0.content must be a string or a list of content parts, not a number"),
        (
            {"type": "text"},
            "messages.0.content must be a string or a list of content parts, not an object",
        ),
        # A list is the right type: what is wrong is inside it, and named there.
        (["hi"], "messages.0.content.0 must be an object, not a string"),
    ],
)
def test_content_of_the_wrong_type_is_named_once_saying_what_it_may_be(
    client: TestClient, fake_llm: FakeLLM, content: Any, said: str
) -> None:
    # QA: `param` was "messages.0.content.str", and the message named pydantic's union
    # members ("messages.0.content.list[dict[str,any]]: Input should be a valid list").
    body = {"messages": [{"role": "user", "content": content}]}
    response = client.post("/v1/chat/completions", json=body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["message"] == f"Invalid request: {said}"
    assert (error["code"], error["param"]) == ("invalid_request", said.split(" ")[0])
    assert fake_llm.requests == []


def test_invalid_thread_id_is_refused(client: TestClient) -> None:
    response = client.post(
        "/v1/chat/completions", json={"messages": [USER]}, headers={"X-Thread-Id": "../../etc"}
    )
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "X-Thread-Id"


def test_health_and_readiness(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz").json()
    assert ready["status"] == "ready"
    assert ready["model"] == "configured"
    for path in ("/healthz", "/readyz", "/"):  # QA: uptime checks asking with HEAD got 405
        asked = client.head(path)
        assert (asked.status_code, asked.content) == (200, b""), path


def test_no_model_mode_still_serves_and_says_which_setting(make_settings: Any) -> None:
    with TestClient(create_app(make_settings())) as client:
        response = client.post("/v1/chat/completions", json={"messages": [USER]})
        assert response.status_code == 200
        assert "SKILLDESK_MODEL" in response.json()["choices"][0]["message"]["content"]
        streamed = client.post("/v1/chat/completions", json={"messages": [USER], "stream": True})
        text = "".join(
            p["choices"][0]["delta"].get("content") or ""
            for p in sse_payloads(streamed.text)
            if p["choices"]
        )
        assert "SKILLDESK_MODEL" in text
        assert client.get("/readyz").json()["model"] == "not configured"


def test_unknown_explicit_skill_is_a_clear_400(client: TestClient, fake_llm: FakeLLM) -> None:
    response = client.post("/v1/chat/completions", json={"messages": [USER], "skill": "nope"})
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "skill"
    assert "GET /v1/skills" in response.json()["error"]["message"]
    assert fake_llm.requests == []


def test_client_side_tool_messages_are_refused(client: TestClient, fake_llm: FakeLLM) -> None:
    messages = [
        USER,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "x", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "42"},
    ]
    response = client.post("/v1/chat/completions", json={"messages": messages})
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "client_tools_unsupported"
    assert response.json()["error"]["param"] == "messages.1"


def test_tools_a_client_offers_are_refused_not_ignored(
    client: TestClient, fake_llm: FakeLLM
) -> None:
    # They were dropped without a word: a client waiting for a call of its own tool got text.
    offered = [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]
    response = client.post("/v1/chat/completions", json={"messages": [USER], "tools": offered})
    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["code"], error["param"]) == ("client_tools_unsupported", "tools")
    assert fake_llm.requests == []
    fake_llm.script(Reply(content="Hi."))
    plain = {"messages": [USER], "tools": [], "temperature": 0.2}  # none offered: answered
    assert client.post("/v1/chat/completions", json=plain).status_code == 200


@pytest.mark.parametrize("content", [[{}], [{"text": "x"}], [{"type": "text"}]])
def test_an_unreadable_content_part_is_a_400_and_the_thread_stays_usable(
    client: TestClient, fake_llm: FakeLLM, content: list[dict[str, Any]]
) -> None:
    headers = {"X-Thread-Id": "parts"}
    fake_llm.script(Reply(content="First answer."))
    first = client.post("/v1/chat/completions", json={"messages": [USER]}, headers=headers)
    assert first.is_success
    bad = {"messages": [{"role": "user", "content": content}]}
    response = client.post("/v1/chat/completions", json=bad, headers=headers)
    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["code"], error["param"]) == ("invalid_content", "messages.0.content.0")
    assert len(fake_llm.requests) == 1
    fake_llm.script(Reply(content="Still here."))
    good = {"messages": [{"role": "user", "content": [{"type": "text", "text": "And now?"}]}]}
    response = client.post("/v1/chat/completions", json=good, headers=headers)
    assert response.json()["choices"][0]["message"]["content"] == "Still here."
    sent = fake_llm.requests[-1]["messages"]
    assert [m["role"] for m in sent[-3:]] == ["user", "assistant", "user"]


def test_unknown_workflow_is_a_clear_400(client: TestClient, fake_llm: FakeLLM) -> None:
    response = client.post("/v1/chat/completions", json={"messages": [USER], "workflow": "nope"})
    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["code"], error["param"]) == ("unknown_workflow", "workflow")
    assert "'nope'" in error["message"]
    assert fake_llm.requests == []


@pytest.mark.parametrize(
    ("names", "param"),
    [
        ({"skill": "order-lookup", "workflow": "order-overview"}, "workflow"),
        ({"skill": "order-lookup", "model": "skilldesk/workflow/order-overview"}, "model"),
        ({"skill": "order-lookup", "model": "skilldesk/skill/order-overview"}, "model"),
    ],
)
def test_a_skill_and_a_workflow_at_once_is_a_clear_400(
    client: TestClient, fake_llm: FakeLLM, names: dict[str, str], param: str
) -> None:
    # Before, the skill answered and the workflow was dropped without a word.
    response = client.post("/v1/chat/completions", json={"messages": [USER], **names})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert (error["code"], error["param"]) == ("conflicting_targets", param)
    assert "'order-lookup'" in error["message"]
    assert "'order-overview'" in error["message"]
    assert fake_llm.requests == []


@pytest.mark.parametrize(
    "raw",
    [
        b'{"messages": [',
        b'{"messages": "\xff\xfe"}',
        b"[" * 5000 + b"]" * 5000,
        b'{"messages": [], "n": ' + b"9" * 5000 + b"}",
    ],
)
def test_a_body_that_is_not_json_says_so(client: TestClient, fake_llm: FakeLLM, raw: bytes) -> None:
    response = client.post(
        "/v1/chat/completions", content=raw, headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["code"], error["param"]) == ("invalid_json", None)
    assert "not valid JSON" in error["message"]
    if raw.startswith(b"[["):  # valid JSON, nested past what the parser takes: named too
        assert "nests arrays and objects deeper" in error["message"]
    if b"9999" in raw:  # valid JSON, a number past what Python converts: named too
        assert "more than 4,300 digits" in error["message"]


@pytest.mark.parametrize(
    ("headers", "said"),
    [
        (
            {"Content-Type": "application/x-www-form-urlencoded"},
            "as 'application/x-www-form-urlencoded'",
        ),
        ({"Content-Type": "text/plain; charset=utf-8"}, "as 'text/plain'"),
        ({}, "without a Content-Type"),
    ],
)
def test_a_json_body_sent_without_its_content_type_is_told_to_send_it(
    client: TestClient, fake_llm: FakeLLM, headers: dict[str, str], said: str
) -> None:
    # `curl -d '{...}'` sends a form: the body was "Input should be a valid dictionary".
    raw = json.dumps({"messages": [USER]}).encode()
    response = client.post("/v1/chat/completions", content=raw, headers=headers)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_content_type"
    assert said in error["message"]
    assert "Content-Type: application/json" in error["message"]
    assert fake_llm.requests == []


def test_stream_null_means_not_streamed(client: TestClient, fake_llm: FakeLLM) -> None:
    fake_llm.script(Reply(content="Plain."))
    body = {"messages": [USER], "stream": None, "stream_options": None}
    response = client.post("/v1/chat/completions", json=body)
    assert response.json()["choices"][0]["message"]["content"] == "Plain."


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"messages": [USER], "stream": "yes"}, "stream"),
        ({"messages": [USER], "stream_options": {"include_usage": "1"}}, "stream_options"),
    ],
)
def test_flags_must_be_booleans(
    client: TestClient, fake_llm: FakeLLM, body: dict[str, Any], param: str
) -> None:
    response = client.post("/v1/chat/completions", json=body)
    assert response.status_code == 400
    assert response.json()["error"]["param"].startswith(param)
    assert fake_llm.requests == []


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    "messages",
    [[{"role": "user", "content": ""}], [{"role": "system", "content": "Be terse."}]],
)
def test_a_request_without_a_user_message_is_refused(
    client: TestClient, fake_llm: FakeLLM, messages: list[dict[str, Any]], stream: bool
) -> None:
    response = client.post("/v1/chat/completions", json={"messages": messages, "stream": stream})
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "no_new_message"
    assert fake_llm.requests == []


@pytest.mark.parametrize("stream", [False, True])
def test_a_continued_thread_needs_a_message_after_the_last_answer(
    client: TestClient, fake_llm: FakeLLM, stream: bool
) -> None:
    # What is new depends on the thread's history: on a new thread this request would be
    # a whole conversation ending with the user's message; here it holds nothing new.
    fake_llm.script(Reply(content="Shipped."))
    headers = {"X-Thread-Id": f"nothing-new-{stream}"}
    first = client.post("/v1/chat/completions", json={"messages": [USER]}, headers=headers)
    assert first.is_success
    resent = {"messages": [USER, {"role": "assistant", "content": "Shipped."}], "stream": stream}
    response = client.post("/v1/chat/completions", json=resent, headers=headers)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "no_new_message"
    assert len(fake_llm.requests) == 1
    assert len(client.get(f"/v1/threads/nothing-new-{stream}").json()["messages"]) == 2


def test_a_retried_request_after_a_failure_is_not_stored_twice(
    client: TestClient, fake_llm: FakeLLM
) -> None:
    headers = {"X-Thread-Id": "retried"}
    fake_llm.script(*[Reply(status=500)] * 3)
    failed = client.post("/v1/chat/completions", json={"messages": [USER]}, headers=headers)
    assert failed.status_code == 502
    fake_llm.script(Reply(content="It shipped."))
    retried = client.post("/v1/chat/completions", json={"messages": [USER]}, headers=headers)
    assert retried.json()["choices"][0]["message"]["content"] == "It shipped."
    sent = [m["content"] for m in fake_llm.requests[-1]["messages"] if m["role"] == "user"]
    assert sent == [USER["content"]]
    # Asked again after the answer, the same words are a new message.
    fake_llm.script(Reply(content="Still shipped."))
    client.post("/v1/chat/completions", json={"messages": [USER]}, headers=headers)
    sent = [m["content"] for m in fake_llm.requests[-1]["messages"] if m["role"] == "user"]
    assert sent == [USER["content"]] * 2


def test_oversized_requests_are_refused_before_they_are_stored(
    make_settings: Any, fake_llm: FakeLLM
) -> None:
    settings = make_settings(
        model="openai/fake-model", model_api_base=fake_llm.base_url, max_request_bytes=50_000
    )
    with TestClient(create_app(settings)) as small:
        headers = {"X-Thread-Id": "big"}
        huge = {"messages": [{"role": "user", "content": "x" * 60_000}]}
        response = small.post("/v1/chat/completions", json=huge, headers=headers)
        assert response.status_code == 413
        assert response.json()["error"]["code"] == "request_too_large"
        assert "SKILLDESK_MAX_REQUEST_BYTES" in response.json()["error"]["message"]
        # Without Content-Length (chunked), the body is counted as it arrives.
        raw = json.dumps(huge).encode()
        chunks = (raw[i : i + 8192] for i in range(0, len(raw), 8192))
        chunked = small.post(
            "/v1/chat/completions",
            content=chunks,
            headers={**headers, "Content-Type": "application/json"},
        )
        assert chunked.status_code == 413
        assert chunked.json()["error"]["code"] == "request_too_large"
        fake_llm.script(Reply(content="Fine."))
        ok = small.post("/v1/chat/completions", json={"messages": [USER]}, headers=headers)
        assert ok.json()["choices"][0]["message"]["content"] == "Fine."


def test_a_message_over_the_text_limit_names_it(client: TestClient, fake_llm: FakeLLM) -> None:
    long = {"role": "user", "content": [{"type": "text", "text": "y" * 100_001}]}
    response = client.post("/v1/chat/completions", json={"messages": [long]})
    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["code"], error["param"]) == ("message_too_long", "messages.0.content")
    assert fake_llm.requests == []


def test_only_the_server_warms_up_and_freezes_what_start_up_built(
    make_settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agents.skills.service import SkillService

    searched: list[tuple[str, int]] = []
    search = SkillService.search

    def recording(self: SkillService, query: str, k: int = 5) -> Any:
        searched.append((query, gc.get_freeze_count()))
        return search(self, query, k)

    monkeypatch.setattr(SkillService, "search", recording)
    gc.unfreeze()
    try:
        served = make_settings(model="openai/fake-model", model_api_base="http://127.0.0.1:9/v1")
        with TestClient(create_app(served, freeze_heap=True)) as client:
            # The libraries, the embedding model, the index and the graph: out of the
            # collector's walks for good.
            assert gc.get_freeze_count() > 100_000
            # The query encoder ran once before the freeze (it loads and traces the model):
            # the first conversation does not wait for it.
            assert searched == [("warm up the query encoder", 0)]
            # Each model profile's transport is built, what its calls import imported.
            gateway = client.app.state.services.gateway  # type: ignore[attr-defined]
            assert sorted(gateway._transports) == ["default"]
            assert client.get("/healthz").status_code == 200
    finally:
        gc.unfreeze()
    searched.clear()
    with TestClient(create_app(make_settings())) as client:
        assert client.get("/healthz").status_code == 200
        assert gc.get_freeze_count() == 0  # an app made in tests or embedded elsewhere
        assert searched == []  # nor warms up: tests start fast


def test_a_continued_thread_is_read_once_per_request(
    client: TestClient, fake_llm: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_llm.script(Reply(content="First."), Reply(content="Second."))
    headers = {"X-Thread-Id": "read-once"}
    first = client.post("/v1/chat/completions", json={"messages": [USER]}, headers=headers)
    assert first.is_success
    saver = client.app.state.services.checkpointer  # type: ignore[attr-defined]
    reads: list[Any] = []
    read = saver.aget_tuple

    async def counted(config: Any) -> Any:
        reads.append(config)
        return await read(config)

    monkeypatch.setattr(saver, "aget_tuple", counted)
    again = {
        "messages": [
            USER,
            {"role": "assistant", "content": "First."},
            {"role": "user", "content": "and now?"},
        ]
    }
    answer = client.post("/v1/chat/completions", json=again, headers=headers)
    assert answer.json()["choices"][0]["message"]["content"] == "Second."
    # The run's own read (new vs continued, repair, retries) and LangGraph's: no third one.
    assert len(reads) == 2
    thread = client.get("/v1/threads/read-once").json()
    said = [(m["role"], m["content"]) for m in thread["messages"]]
    assert said == [  # the resent history was not added again
        ("human", "Where is my order?"),
        ("ai", "First."),
        ("human", "and now?"),
        ("ai", "Second."),
    ]


def test_a_streamed_requests_log_line_names_its_run_and_thread(
    client: TestClient, fake_llm: FakeLLM
) -> None:
    # QA: a streamed response is sent from a task of its own: the request's last log line
    # had no run id (and no thread id without X-Thread-Id), its headers had both.
    from structlog.testing import capture_logs

    fake_llm.script(Reply(content="Streamed."), Reply(content="Streamed too."))
    with capture_logs() as logs:
        runs = client.post("/v1/threads/logged/runs/stream", json={"message": "hi"})
        chat = client.post("/v1/chat/completions", json={"messages": [USER], "stream": True})
    lines = [e for e in logs if e["event"] == "http.request"]
    assert len(lines) == 2, lines
    for line, response in zip(lines, (runs, chat), strict=True):
        assert line["run_id"] == response.headers["X-Run-Id"], line
        assert line["thread_id"] == response.headers["X-Thread-Id"], line
