"""The script read against the request: parsed views, problems, held replies, the fixture."""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import openai
import pytest
from openai import OpenAI
from openai.types.chat import ChatCompletionMessageParam

from tests.fakellm import (
    FakeLLM,
    Reply,
    RequestView,
    ScriptMismatch,
    SkillSignature,
    ToolCall,
    describe,
)

USER: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Where is my order ORD1?"}]


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
    root = str(Path(__file__).resolve().parents[3])
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
