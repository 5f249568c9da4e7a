"""The scripted OpenAI-compatible server: replies, streams, faults, delays, records."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import openai
import pytest
from openai import OpenAI
from openai.types.chat import ChatCompletionMessageFunctionToolCall, ChatCompletionMessageParam

from tests.fakellm import (
    NO_REPLY_MESSAGE,
    FakeLLM,
    Reply,
    RequestView,
    ToolCall,
)

USER: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Where is my order ORD1?"}]


def test_openai_client_gets_non_streamed_answer_with_scripted_content_and_usage(
    fake: FakeLLM, client: OpenAI
) -> None:
    fake.script(Reply(content="Hello there"))
    messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": "x" * 40}]
    resp = client.chat.completions.create(model="gpt-4o-mini", messages=messages)
    assert resp.object == "chat.completion"
    assert resp.model == "gpt-4o-mini"
    assert resp.choices[0].message.role == "assistant"
    assert resp.choices[0].message.content == "Hello there"
    assert resp.choices[0].finish_reason == "stop"
    assert resp.usage is not None
    assert (resp.usage.prompt_tokens, resp.usage.completion_tokens) == (10, 2)
    assert resp.usage.total_tokens == 12


def test_explicit_usage_and_finish_reason_override_the_computed_ones(
    fake: FakeLLM, client: OpenAI
) -> None:
    usage = {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}
    fake.script(Reply(content="cut", usage=usage, finish_reason="length"))
    resp = client.chat.completions.create(model="m", messages=USER)
    assert resp.usage is not None
    assert resp.usage.total_tokens == 10
    assert resp.choices[0].finish_reason == "length"


def test_streamed_content_arrives_in_several_chunks_and_usage_only_with_include_usage(
    fake: FakeLLM, client: OpenAI
) -> None:
    text = "Your order  ORD1 ships tomorrow. "
    fake.script(Reply(content=text), Reply(content=text))

    chunks = list(client.chat.completions.create(model="m", messages=USER, stream=True))
    assert chunks[0].choices[0].delta.role == "assistant"
    pieces = [
        c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content
    ]
    assert len(pieces) > 1
    assert "".join(pieces) == text
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert all(c.usage is None for c in chunks)

    stream = client.chat.completions.create(
        model="m", messages=USER, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.total_tokens > 0
    assert all(c.usage is None for c in chunks[:-1])


def test_streamed_tool_calls_reassemble_with_name_id_and_arguments(
    fake: FakeLLM, client: OpenAI
) -> None:
    fake.script(
        Reply(
            tool_calls=[
                ToolCall(name="get_order", arguments={"order_id": "ORD1"}, id="call_abc"),
                ToolCall(name="get_customer", arguments={"customer_id": "C9", "full": True}),
            ]
        )
    )
    calls: dict[int, dict[str, Any]] = {}
    pieces: dict[int, int] = {}
    finish = None
    for chunk in client.chat.completions.create(model="m", messages=USER, stream=True):
        choice = chunk.choices[0]
        finish = choice.finish_reason or finish
        for delta in choice.delta.tool_calls or []:
            call = calls.setdefault(delta.index, {"id": None, "name": None, "arguments": ""})
            if delta.id:
                call["id"] = delta.id
            if delta.function and delta.function.name:
                call["name"] = delta.function.name
            if delta.function and delta.function.arguments:
                call["arguments"] += delta.function.arguments
                pieces[delta.index] = pieces.get(delta.index, 0) + 1
    assert finish == "tool_calls"
    assert calls[0]["id"] == "call_abc"
    assert calls[0]["name"] == "get_order"
    assert json.loads(calls[0]["arguments"]) == {"order_id": "ORD1"}
    assert calls[1]["id"].startswith("call_")
    assert calls[1]["name"] == "get_customer"
    assert json.loads(calls[1]["arguments"]) == {"customer_id": "C9", "full": True}
    assert pieces[0] >= 2
    assert pieces[1] >= 2


def test_non_streamed_tool_call_uses_openai_format(fake: FakeLLM, client: OpenAI) -> None:
    fake.script(Reply(tool_calls=[ToolCall(name="get_order", arguments={"order_id": "ORD1"})]))
    resp = client.chat.completions.create(model="m", messages=USER)
    message = resp.choices[0].message
    assert resp.choices[0].finish_reason == "tool_calls"
    assert message.content is None
    assert message.tool_calls is not None
    call = message.tool_calls[0]
    assert isinstance(call, ChatCompletionMessageFunctionToolCall)
    assert call.type == "function"
    assert call.id == "call_1"
    assert call.function.name == "get_order"
    assert json.loads(call.function.arguments) == {"order_id": "ORD1"}


def test_500_fault_reaches_openai_client_and_a_later_reply_still_answers(
    fake: FakeLLM, client: OpenAI
) -> None:
    fake.script(Reply(status=500, error_message="boom"), Reply(content="recovered"))
    with pytest.raises(openai.InternalServerError) as info:
        client.chat.completions.create(model="m", messages=USER)
    assert info.value.status_code == 500
    assert info.value.body == {
        "message": "boom",
        "type": "server_error",
        "param": None,
        "code": None,
    }
    resp = client.chat.completions.create(model="m", messages=USER)
    assert resp.choices[0].message.content == "recovered"


def test_error_status_in_streaming_mode_is_a_plain_http_error(
    fake: FakeLLM, client: OpenAI
) -> None:
    fake.script(Reply(status=429))
    with pytest.raises(openai.RateLimitError):
        client.chat.completions.create(model="m", messages=USER, stream=True)


def test_delay_longer_than_client_timeout_raises_timeout(fake: FakeLLM) -> None:
    fake.script(Reply(delay=1.0, content="late"))
    with OpenAI(base_url=fake.base_url, api_key="sk-test", max_retries=0, timeout=0.3) as c:
        start = time.monotonic()
        with pytest.raises(openai.APITimeoutError):
            c.chat.completions.create(model="m", messages=USER)
        assert time.monotonic() - start < 0.9


def test_short_delay_and_stream_chunk_delay_are_observable(fake: FakeLLM, client: OpenAI) -> None:
    fake.script(Reply(delay=0.2, content="ok"), Reply(content="a b c", stream_chunk_delay=0.1))
    start = time.monotonic()
    client.chat.completions.create(model="m", messages=USER)
    assert time.monotonic() - start >= 0.2
    arrivals = [
        time.monotonic()
        for _ in client.chat.completions.create(model="m", messages=USER, stream=True)
    ]
    assert arrivals[-1] - arrivals[0] >= 0.3


def test_malformed_tool_call_arguments_are_delivered_verbatim(
    fake: FakeLLM, client: OpenAI
) -> None:
    bad = ToolCall(name="x", arguments='{"bad json')
    fake.script(Reply(tool_calls=[bad]), Reply(tool_calls=[bad]))
    resp = client.chat.completions.create(model="m", messages=USER)
    assert resp.choices[0].message.tool_calls is not None
    call = resp.choices[0].message.tool_calls[0]
    assert isinstance(call, ChatCompletionMessageFunctionToolCall)
    assert call.function.arguments == '{"bad json'
    streamed = ""
    for chunk in client.chat.completions.create(model="m", messages=USER, stream=True):
        for delta in chunk.choices[0].delta.tool_calls or []:
            streamed += (delta.function and delta.function.arguments) or ""
    assert streamed == '{"bad json'


def test_callable_script_sees_request_body_and_requests_are_recorded(
    fake: FakeLLM, client: OpenAI
) -> None:
    fake.script(
        lambda request: Reply(content=f"echo {request.last_user}"),
        Reply(status=503),
    )
    resp = client.chat.completions.create(model="m1", messages=USER, temperature=0)
    assert resp.choices[0].message.content == "echo Where is my order ORD1?"
    with pytest.raises(openai.APIStatusError):
        client.chat.completions.create(model="m2", messages=USER)
    bodies = fake.requests
    assert [b["model"] for b in bodies] == ["m1", "m2"]
    assert bodies[0]["messages"] == USER
    assert bodies[0]["temperature"] == 0


def test_exhausted_script_answers_500_and_remaining_counts_down(
    fake: FakeLLM, client: OpenAI
) -> None:
    fake.script(Reply(content="only one"))
    assert fake.remaining == 1
    client.chat.completions.create(model="m", messages=USER)
    assert fake.remaining == 0
    with pytest.raises(openai.InternalServerError) as info:
        client.chat.completions.create(model="m", messages=USER)
    assert NO_REPLY_MESSAGE in str(info.value)
    assert len(fake.requests) == 2


def test_reset_clears_script_and_requests(fake: FakeLLM, client: OpenAI) -> None:
    fake.script(Reply(content="a"), Reply(content="b"))
    client.chat.completions.create(model="m", messages=USER)
    fake.reset()
    assert fake.remaining == 0
    assert fake.requests == []


def test_models_endpoint_lists_fake_model(client: OpenAI) -> None:
    assert [m.id for m in client.models.list()] == ["fake-model"]


def test_litellm_completion_gets_scripted_content(
    fake: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    fake.script(Reply(content="Hi from litellm"), Reply(content="streamed via litellm"))
    kwargs: dict[str, Any] = {
        "model": "openai/fake-model",
        "api_base": fake.base_url,
        "api_key": "sk-test",
        "messages": USER,
    }
    resp = litellm.completion(**kwargs)
    assert resp.choices[0].message.content == "Hi from litellm"
    parts = [c.choices[0].delta.content or "" for c in litellm.completion(**kwargs, stream=True)]
    assert "".join(parts) == "streamed via litellm"
    assert fake.requests[0]["model"] == "fake-model"


def test_context_manager_stops_the_server_on_exit() -> None:
    with FakeLLM() as other:
        url = other.base_url
        assert httpx.get(f"{url}/models").status_code == 200
    start = time.monotonic()
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{url}/models", timeout=1)
    assert time.monotonic() - start < 1


def test_answering_intervals_cover_each_reply_to_its_last_byte(
    fake: FakeLLM, client: OpenAI
) -> None:
    # The benchmark counts these intervals as model time; everything else is framework.
    fake.script(Reply(content="a b c", stream_chunk_delay=0.05), Reply(content="whole"))
    before = time.perf_counter()
    parts = list(client.chat.completions.create(model="m", messages=USER, stream=True))
    between = time.perf_counter()
    client.chat.completions.create(model="m", messages=USER)
    after = time.perf_counter()
    (s1, e1), (s2, e2) = fake.answering
    assert before <= s1 < e1 <= between <= s2 < e2 <= after
    assert e1 - s1 >= 0.05 * (len(parts) - 2)  # the streamed one lasted to its last chunk
    fake.reset()
    assert fake.answering == []


def _shout(request: RequestView) -> Reply:
    """A script callable that crosses to the server's process (module level: picklable)."""
    return Reply(content=request.last_user.upper())


def _pick(request: RequestView) -> Reply:
    return Reply(tool_calls=[ToolCall("pick", {"x": 1})])


def test_the_server_in_a_process_of_its_own_is_driven_like_the_thread_one() -> None:
    from tests.fakellm.process import FakeLLMProcess

    tool: Any = {"type": "function", "function": {"name": "pick", "parameters": {}}}
    with (
        FakeLLMProcess() as fake,
        OpenAI(base_url=fake.base_url, api_key="k", max_retries=0, timeout=5) as client,
    ):
        fake.script(_shout)
        fake.on_forced_tool("pick", _pick)
        reply = client.chat.completions.create(model="m", messages=USER)
        assert reply.choices[0].message.content == "WHERE IS MY ORDER ORD1?"
        forced = client.chat.completions.create(
            model="m",
            messages=USER,
            tools=[tool],
            tool_choice={"type": "function", "function": {"name": "pick"}},
        )
        calls = forced.choices[0].message.tool_calls or []
        assert [c.function.arguments for c in calls] == ['{"x": 1}']
        assert [r["messages"] for r in fake.requests] == [USER, USER]
        assert all(start < end for start, end in fake.answering)
        assert len(fake.answering) == 2
        fake.reset()
        assert fake.requests == []
        with pytest.raises(AttributeError):
            fake._ask("no_such_member")
