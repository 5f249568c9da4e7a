"""Tests of the scripted OpenAI-compatible fake server itself."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
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
    ScriptMismatch,
    SkillSignature,
    ToolCall,
    describe,
)

USER: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Where is my order ORD1?"}]


@pytest.fixture(scope="module")
def server() -> Iterator[FakeLLM]:
    with FakeLLM() as fake:
        yield fake


@pytest.fixture
def fake(server: FakeLLM) -> FakeLLM:
    server.reset()
    return server


@pytest.fixture
def client(fake: FakeLLM) -> Iterator[OpenAI]:
    with OpenAI(base_url=fake.base_url, api_key="sk-test", max_retries=0, timeout=5) as c:
        yield c


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


TOOLS: Any = [
    {
        "type": "function",
        "function": {
            "name": "get_order",
            "description": "Look an order up.",
            "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}},
        },
    },
    {"type": "function", "function": {"name": "load_skill", "parameters": {}}},
]
CONVERSATION: Any = [
    {"role": "system", "content": "Preamble.\n\nReport the order status.\n\nMore."},
    {"role": "user", "content": "Where is my order ORD1?"},
    {"role": "assistant", "content": "It shipped."},
    {"role": "user", "content": [{"type": "text", "text": "And ORD2?"}]},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "get_order", "arguments": '{"order_id": "ORD2"}'},
            },
            {"id": "c2", "type": "function", "function": {"name": "x", "arguments": "{bad"}},
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": '{"status": "packed"}'},
    {"role": "tool", "tool_call_id": "c2", "content": "error (invalid_arguments)"},
]


def test_a_script_callable_reads_a_parsed_view_of_the_request(
    fake: FakeLLM, client: OpenAI
) -> None:
    seen: list[RequestView] = []

    def answer(request: RequestView) -> Reply:
        seen.append(request)
        return Reply(content="ok")

    fake.script(answer)
    client.chat.completions.create(model="m", messages=CONVERSATION, tools=TOOLS)
    [request] = seen
    assert request.model == "m"
    assert request.system == "Preamble.\n\nReport the order status.\n\nMore."
    assert request.tool_names == {"get_order", "load_skill"}
    assert request.offers("get_order")
    assert not request.offers("get_order", "create_ticket")
    assert request.tool("get_order").parameters["properties"] == {"order_id": {"type": "string"}}
    assert request.forced_tool is None
    assert [m.role for m in request.messages] == [
        "system", "user", "assistant", "user", "assistant", "tool", "tool",
    ]  # fmt: skip
    assert request.last_user == "And ORD2?"  # text parts joined
    assert [m.role for m in request.turn] == ["assistant", "tool", "tool"]
    calls = request.messages[4].tool_calls
    assert [(c.id, c.name, c.args) for c in calls] == [
        ("c1", "get_order", {"order_id": "ORD2"}),
        ("c2", "x", None),  # not JSON: kept as sent, decoded to None
    ]
    assert [(m.tool_name, m.text) for m in request.results] == [
        ("get_order", '{"status": "packed"}'),
        ("x", "error (invalid_arguments)"),
    ]
    assert [m.text for m in request.results_of("get_order")] == ['{"status": "packed"}']
    assert request.body["messages"][3]["content"] == [{"type": "text", "text": "And ORD2?"}]
    assert fake.views == seen
    assert fake.requests == [dict(request.body)]


def test_a_view_tells_which_skills_a_request_holds_by_instructions_and_tools() -> None:
    orders = SkillSignature("order-lookup", "Report the order status.", ("get_order",))
    alarms = SkillSignature("device-alarms", "List the alarms.", ("list_alarms",))
    notes = SkillSignature("notes", "Report the order status.", ())  # no tools of its own
    request = RequestView.parse({"messages": CONVERSATION, "tools": TOOLS})
    assert request.system_contains("  Report the order status.\n")  # a body, stripped
    assert request.holds(orders)
    assert not request.holds(alarms)
    assert request.skills([alarms, orders, notes]) == ["order-lookup", "notes"]
    only_tools = RequestView.parse({"messages": CONVERSATION[1:], "tools": TOOLS})
    assert not only_tools.holds(orders)  # the tools without the instructions


def test_a_malformed_request_gives_an_empty_view_not_an_error() -> None:
    request = RequestView.parse({"messages": "nope", "tools": [{"x": 1}], "tool_choice": "auto"})
    assert (request.messages, request.tools, request.forced_tool) == ((), (), None)
    assert (request.system, request.last_user, request.last) == ("", "", None)
    assert request.describe() == "no messages, tools offered: none"


def test_a_forced_tool_request_is_answered_by_its_handler_with_the_view(
    fake: FakeLLM, client: OpenAI
) -> None:
    fake.on_forced_tool(
        "get_order",
        lambda request: Reply(tool_calls=[ToolCall("get_order", {"order_id": request.last_user})]),
    )
    forced: Any = {"type": "function", "function": {"name": "get_order"}}
    client.chat.completions.create(model="m", messages=USER, tools=TOOLS, tool_choice=forced)
    [view] = fake.views
    assert view.forced_tool == "get_order"
    assert fake.forced_requests == [dict(view.body)]
    assert fake.scripted_requests == fake.scripted_views == []
    assert fake.problems() == []  # not unscripted


def test_leftover_replies_are_problems_naming_how_many_and_what(
    fake: FakeLLM, client: OpenAI
) -> None:
    def later(request: RequestView) -> Reply:
        return Reply(content="later")

    fake.script(Reply(content="used"), Reply(content="spare", delay=0.5), later)
    client.chat.completions.create(model="m", messages=USER)
    [problem] = fake.problems()
    assert problem.startswith("2 scripted replies left over")
    assert "1. Reply(content='spare', delay=0.5)" in problem
    assert "2. callable " in problem
    assert "later" in problem
    with pytest.raises(ScriptMismatch, match="2 scripted replies left over"):
        fake.check()
    assert describe(fake.leftovers[0]) == "Reply(content='spare', delay=0.5)"
    fake.allow_leftovers()
    assert fake.problems() == []
    fake.check()
    fake.reset()  # an allowance lasts until the next reset
    fake.script(Reply(content="x"))
    assert fake.problems()


def test_a_request_with_no_scripted_reply_is_a_problem_naming_it(
    fake: FakeLLM, client: OpenAI
) -> None:
    with pytest.raises(openai.InternalServerError):
        client.chat.completions.create(model="m", messages=CONVERSATION[:4], tools=TOOLS)
    [view] = fake.unscripted
    assert view.last_user == "And ORD2?"
    [problem] = fake.problems()
    assert problem.startswith("1 request found no scripted reply")
    assert "last user message 'And ORD2?', tools offered: get_order, load_skill" in problem
    assert [e.source for e in fake.exchanges] == ["unscripted"]
    fake.allow_unscripted()
    assert fake.problems() == []


def test_a_failing_script_callable_is_a_problem_even_when_allowed(
    fake: FakeLLM, client: OpenAI
) -> None:
    def broken(request: RequestView) -> Reply:
        raise KeyError("no such skill")

    fake.script(broken, lambda request: "not a reply")  # type: ignore[arg-type,return-value]
    for _ in range(2):
        with pytest.raises(openai.InternalServerError, match="FakeLLM: script callable"):
            client.chat.completions.create(model="m", messages=USER)
    fake.allow_unscripted()
    fake.allow_leftovers()
    raised, returned = fake.problems()
    assert "broken raised KeyError('no such skill')" in raised
    assert "last user message 'Where is my order ORD1?'" in raised
    assert "returned 'not a reply', not a Reply" in returned


def test_exchanges_record_arrival_and_answer_of_each_request(fake: FakeLLM, client: OpenAI) -> None:
    fake.script(Reply(content="a b", stream_chunk_delay=0.05), Reply(content="c"))
    list(client.chat.completions.create(model="m", messages=USER, stream=True))
    client.chat.completions.create(model="m", messages=USER)
    first, second = fake.exchanges
    assert first.answered is not None
    assert second.answered is not None
    assert first.arrived < first.answered <= second.arrived < second.answered
    assert not first.overlaps(second)
    assert [(e.source, e.request.stream) for e in fake.exchanges] == [
        ("script", True),
        ("script", False),
    ]


def test_replies_held_together_answer_once_both_requests_are_open(fake: FakeLLM) -> None:
    # Whatever the machine's speed: two requests at once overlap, one alone waits it out.
    fake.script(Reply(content="one", together=2), Reply(content="two", together=2))

    def ask() -> str | None:
        with OpenAI(base_url=fake.base_url, api_key="k", max_retries=0, timeout=10) as c:
            return c.chat.completions.create(model="m", messages=USER).choices[0].message.content

    with ThreadPoolExecutor(2) as pool:
        answers = sorted(pool.map(lambda _: ask(), range(2)))
    assert answers == ["one", "two"]
    first, second = fake.exchanges
    assert first.overlaps(second)
    fake.script(Reply(content="alone", together=2, hold_timeout=0.2))
    started = time.perf_counter()
    assert ask() == "alone"
    assert time.perf_counter() - started >= 0.2
    assert not fake.exchanges[2].overlaps(second)


FIXTURE_TESTS = """
from tests.fakellm import Reply


def test_passes_with_a_reply_left_over(fake_llm):
    fake_llm.script(Reply(content="never asked"))


def test_says_it_leaves_a_reply(fake_llm):
    fake_llm.script(Reply(content="never asked"))
    fake_llm.allow_leftovers()


def test_asks_for_an_unscripted_reply_and_fails(fake_llm):
    import openai

    with openai.OpenAI(base_url=fake_llm.base_url, api_key="k", max_retries=0) as client:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
"""


def test_the_fake_llm_fixture_fails_a_passing_test_that_left_replies_or_found_none(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = str(Path(__file__).resolve().parents[2])
    path = [root, os.environ.get("PYTHONPATH")]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in path if p))
    pytester.makeconftest(
        "from tests.conftest import _clean_env, _fake_llm_server, fake_llm\n"
        "from tests.conftest import pytest_runtest_makereport\n"
    )
    pytester.makepyfile(FIXTURE_TESTS)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, failed=1, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*ERROR at teardown of test_passes_with_a_reply_left_over*",
            "*1 scripted reply left over*",
            "*1. Reply(content='never asked')*",
            "*FakeLLM script*",  # the failed test shows what went off the script...
            "*1 request found no scripted reply*",
            "*1. last user message 'hi', tools offered: none",
        ]
    )
    assert "ERROR at teardown of test_asks_for" not in result.stdout.str()  # ...only once


def test_a_responses_api_request_reads_as_its_chat_completions_view() -> None:
    from tests.fakellm.responses import chat_body

    body = {
        "model": "gpt-5-mini",
        "instructions": "Be brief.",
        "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "where is A1?"}]},
            {"type": "function_call", "call_id": "c1", "name": "get_order", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "shipped"},
        ],
        "tools": [{"type": "function", "name": "get_order", "parameters": {}}],
        "tool_choice": {"type": "function", "name": "get_order"},
        "stream": True,
    }
    view = RequestView.parse(chat_body(body))
    assert view.system == "Be brief."
    assert view.last_user == "where is A1?"
    assert [c.name for c in view.messages[2].tool_calls] == ["get_order"]
    assert view.results_of("get_order")[0].text == "shipped"
    assert (view.tool_names, view.forced_tool, view.stream) == ({"get_order"}, "get_order", True)
