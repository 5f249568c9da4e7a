"""One conformance suite for the gateway's three paths to a model: direct (an OpenAI-compatible
server over its own HTTP client), litellm, and a LangChain chat model (``ChatOpenAI``, over
chat completions and over the Responses API).

Each test runs over each path against the scripted server: the answer, its stream, tool calls,
usage, strict tool-call checking, retries, fallbacks, timeouts and the error codes are the
gateway's, the same whichever path a profile takes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from langchain_core.callbacks import AsyncCallbackHandler
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.messages.ai import add_ai_message_chunks

from agents.errors import ModelError
from agents.loop import complete
from agents.models import ModelGateway, load_models_config
from agents.models.chat_model import finish_stream
from tests.fakellm import FakeLLM, Reply, ToolCall

HELLO = [HumanMessage(content="hello")]
ORDER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_order",
        "description": "Look up an order",
        "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}},
    },
}
# How each path writes a model of an OpenAI-compatible server.
PATHS = {
    "direct": "model: openai/{name}",
    "litellm": "model: hosted_vllm/{name}",
    "langchain": "provider: langchain\n    model: 'openai:{name}'",
    "langchain-responses": (
        "provider: langchain\n    model: 'openai:{name}'\n    kwargs: {{use_responses_api: true}}"
    ),
}
_OPENED: list[ModelGateway] = []


@pytest.fixture(params=sorted(PATHS))
def path(request: pytest.FixtureRequest) -> str:
    """The way to the model every profile of the test takes."""
    return str(request.param)


@pytest.fixture(autouse=True)
async def _close_gateways() -> AsyncIterator[None]:
    yield
    while _OPENED:
        await _OPENED.pop().aclose()


def gateway_for(
    tmp_path: Path,
    path: str,
    primary: FakeLLM,
    backup: FakeLLM | None = None,
    timeout: float = 5.0,
    retries: int = 1,
) -> ModelGateway:
    text = f"""
default: main
profiles:
  main:
    {PATHS[path].format(name="fake-model")}
    api_base: {primary.base_url}/
    api_key_env: FAKE_KEY
    timeout_s: {timeout}
    retries: {retries}
    {"fallbacks: [backup]" if backup else ""}
"""
    if backup:
        text += f"""
  backup:
    {PATHS[path].format(name="backup-model")}
    api_base: {backup.base_url}
    retries: 0
"""
    file = tmp_path / "models.yaml"
    file.write_text(text, encoding="utf-8")
    env = {"FAKE_KEY": "sk-fake\n"}
    gateway = ModelGateway(load_models_config(models_file=file, environ=env), environ=env)
    _OPENED.append(gateway)
    return gateway


async def streamed(model: object) -> AIMessage:
    """A streamed reply put together as the tool loop does."""
    chunks = [chunk async for chunk in model.astream(HELLO)]  # type: ignore[attr-defined]
    return finish_stream(add_ai_message_chunks(chunks[0], *chunks[1:]))


async def test_a_whole_answer_comes_back_with_its_usage(
    tmp_path: Path, path: str, fake_llm: FakeLLM
) -> None:
    usage = {"prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9}
    fake_llm.script(Reply(content="Hi there", usage=usage))
    gateway = gateway_for(tmp_path, path, fake_llm)
    reply = await gateway.chat_model().ainvoke(HELLO)
    assert reply.content == "Hi there"
    assert reply.usage_metadata is not None
    assert (reply.usage_metadata["input_tokens"], reply.usage_metadata["output_tokens"]) == (7, 2)
    assert gateway.usage.totals()["main"] == {"calls": 1, "input_tokens": 7, "output_tokens": 2}
    assert fake_llm.views[0].model == "fake-model"
    assert fake_llm.views[0].last_user == "hello"


async def test_a_streamed_answer_comes_in_pieces_with_its_usage(
    tmp_path: Path, path: str, fake_llm: FakeLLM
) -> None:
    fake_llm.script(Reply(content="one two three four", stream_chunk_delay=0.02))
    gateway = gateway_for(tmp_path, path, fake_llm)
    chunks = [c async for c in gateway.chat_model().astream(HELLO)]
    assert len([c for c in chunks if c.content]) >= 3
    assert "".join(str(c.content) for c in chunks) == "one two three four"
    assert fake_llm.views[0].stream
    assert gateway.usage.totals()["main"]["calls"] == 1


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_bound_tools_produce_tool_calls(
    tmp_path: Path, path: str, fake_llm: FakeLLM, stream: bool
) -> None:
    fake_llm.script(Reply(tool_calls=[ToolCall(name="get_order", arguments={"order_id": "A1"})]))
    model = gateway_for(tmp_path, path, fake_llm).chat_model().bind_tools([ORDER_TOOL])
    reply = await (streamed(model) if stream else model.ainvoke(HELLO))
    assert [(c["name"], c["args"]) for c in reply.tool_calls] == [("get_order", {"order_id": "A1"})]
    assert fake_llm.views[0].tool_names == {"get_order"}


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_malformed_tool_call_json_becomes_an_invalid_tool_call(
    tmp_path: Path, path: str, fake_llm: FakeLLM, stream: bool
) -> None:
    fake_llm.script(Reply(tool_calls=[ToolCall(name="get_order", arguments='{"order_id": ')]))
    model = gateway_for(tmp_path, path, fake_llm).chat_model().bind_tools([ORDER_TOOL])
    reply = await (streamed(model) if stream else model.ainvoke(HELLO))
    assert reply.tool_calls == []
    assert reply.invalid_tool_calls[0]["name"] == "get_order"


async def test_a_forced_tool_is_forced_on_the_wire(
    tmp_path: Path, path: str, fake_llm: FakeLLM
) -> None:
    fake_llm.script(Reply(tool_calls=[ToolCall(name="get_order", arguments={"order_id": "B2"})]))
    model = gateway_for(tmp_path, path, fake_llm).chat_model()
    reply = await model.bind_tools([ORDER_TOOL], tool_choice="get_order").ainvoke(HELLO)
    assert reply.tool_calls[0]["args"] == {"order_id": "B2"}
    assert fake_llm.views[0].forced_tool == "get_order"


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_a_500_is_retried_then_falls_back(
    tmp_path: Path, path: str, fake_llm: FakeLLM, backup_llm: FakeLLM, stream: bool
) -> None:
    fake_llm.script(Reply(status=500), Reply(status=500))
    backup_llm.script(Reply(content="from backup"))
    model = gateway_for(tmp_path, path, fake_llm, backup_llm, retries=1).chat_model()
    reply = await (streamed(model) if stream else model.ainvoke(HELLO))
    assert reply.content == "from backup"
    assert len(fake_llm.requests) == 2  # the first try and one retry
    assert backup_llm.views[0].model == "backup-model"


async def test_a_timeout_falls_back(
    tmp_path: Path, path: str, fake_llm: FakeLLM, backup_llm: FakeLLM
) -> None:
    fake_llm.script(Reply(delay=3, content="late"))
    backup_llm.script(Reply(content="in time"))
    gateway = gateway_for(tmp_path, path, fake_llm, backup_llm, timeout=0.3, retries=0)
    assert (await gateway.chat_model().ainvoke(HELLO)).content == "in time"


async def test_a_timeout_alone_is_reported_as_a_timeout(
    tmp_path: Path, path: str, fake_llm: FakeLLM
) -> None:
    fake_llm.script(Reply(delay=3, content="late"))
    with pytest.raises(ModelError) as info:
        await (
            gateway_for(tmp_path, path, fake_llm, timeout=0.3, retries=0)
            .chat_model()
            .ainvoke(HELLO)
        )
    assert info.value.code == "model_timeout"


async def test_every_profile_failing_gives_the_same_error_code(
    tmp_path: Path, path: str, fake_llm: FakeLLM, backup_llm: FakeLLM
) -> None:
    fake_llm.script(Reply(status=500))
    backup_llm.script(Reply(status=500))
    gateway = gateway_for(tmp_path, path, fake_llm, backup_llm, retries=0)
    with pytest.raises(ModelError) as info:
        await gateway.chat_model().ainvoke(HELLO)
    assert info.value.code == "model_unavailable"
    assert "'main' → 'backup'" in info.value.detail


async def test_a_refused_key_is_not_retried_and_says_to_check_the_key(
    tmp_path: Path, path: str, fake_llm: FakeLLM
) -> None:
    fake_llm.script(Reply(status=401))
    with pytest.raises(ModelError) as info:
        await gateway_for(tmp_path, path, fake_llm, retries=2).chat_model().ainvoke(HELLO)
    assert info.value.code == "model_auth_failed"
    assert len(fake_llm.requests) == 1


def test_blocking_calls_answer_and_fall_back(
    tmp_path: Path, path: str, fake_llm: FakeLLM, backup_llm: FakeLLM
) -> None:
    fake_llm.script(Reply(status=500), Reply(content="blocking stream"))
    backup_llm.script(Reply(content="blocking backup"))
    gateway = gateway_for(tmp_path, path, fake_llm, backup_llm, retries=0)
    assert gateway.chat_model().invoke(HELLO).content == "blocking backup"
    text = "".join(str(c.content) for c in gateway.chat_model().stream(HELLO))
    assert text == "blocking stream"


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_reasoning_is_counted_and_kept_out_of_the_answer(
    tmp_path: Path, path: str, fake_llm: FakeLLM, stream: bool
) -> None:
    fake_llm.script(Reply(content="Forty-two.", reasoning="Six times seven is forty-two."))
    model = gateway_for(tmp_path, path, fake_llm).chat_model()
    reply = await (streamed(model) if stream else model.ainvoke(HELLO))
    assert reply.content == "Forty-two."
    assert "seven" not in str(reply)
    assert reply.usage_metadata is not None
    assert reply.usage_metadata.get("output_token_details", {}).get("reasoning", 0) > 0


async def test_a_stream_closed_half_read_leaves_the_model_usable(
    tmp_path: Path, path: str, fake_llm: FakeLLM
) -> None:
    fake_llm.script(Reply(content="one two three four five", stream_chunk_delay=0.05))
    fake_llm.script(Reply(content="next"))
    model = gateway_for(tmp_path, path, fake_llm).chat_model()
    stream = model.astream(HELLO)
    await anext(stream)
    await stream.aclose()
    assert (await model.ainvoke(HELLO)).content == "next"


async def test_a_stream_that_breaks_after_its_first_chunk_is_reported_not_retried(
    tmp_path: Path, path: str, fake_llm: FakeLLM, backup_llm: FakeLLM
) -> None:
    fake_llm.script(Reply(content="one two three", stream_chunk_delay=2))
    gateway = gateway_for(tmp_path, path, fake_llm, backup_llm, timeout=0.3, retries=1)
    with pytest.raises(ModelError) as info:
        async for _chunk in gateway.chat_model().astream(HELLO):
            pass
    assert info.value.code == "model_timeout", info.value.message
    assert len(fake_llm.requests) == 1
    assert not backup_llm.requests


@pytest.mark.parametrize(
    "reply",
    [
        Reply(content="one two three", usage={"prompt_tokens": 7, "completion_tokens": 3}),
        Reply(tool_calls=[ToolCall(name="get_order", arguments={"order_id": "A1"})]),
        Reply(tool_calls=[ToolCall(name="get_order", arguments='{"order_id": ')]),
        Reply(content="Forty-two.", reasoning="Six times seven is forty-two."),
    ],
    ids=["text", "tool-call", "malformed", "reasoning"],
)
async def test_the_tool_loops_direct_stream_reads_a_reply_as_langchain_does(
    tmp_path: Path, path: str, fake_llm: FakeLLM, reply: Reply
) -> None:
    fake_llm.script(reply, reply)
    gateway = gateway_for(tmp_path, path, fake_llm)
    model = gateway.chat_model().bind_tools([ORDER_TOOL])
    through_langchain = await streamed(model)
    direct = await complete(model, HELLO, {})
    assert fake_llm.views[1].stream
    assert fake_llm.views[1].tool_names == {"get_order"}
    for name in ("content", "usage_metadata"):
        assert getattr(direct, name) == getattr(through_langchain, name), name
    for name in ("tool_calls", "invalid_tool_calls"):  # the server numbers its calls' ids
        ours, theirs = getattr(direct, name), getattr(through_langchain, name)
        assert [{**c, "id": None} for c in ours] == [{**c, "id": None} for c in theirs], name
        assert all(c["id"] for c in ours)
    for key in ("finish_reason", "profile", "cost_micro_usd"):
        assert direct.response_metadata.get(key) == through_langchain.response_metadata.get(key)
    assert gateway.usage.totals()["main"]["calls"] == 2


async def test_a_listening_callback_handler_sees_the_tool_loops_call(
    tmp_path: Path, path: str, fake_llm: FakeLLM
) -> None:
    class Tokens(AsyncCallbackHandler):
        def __init__(self) -> None:
            self.tokens: list[str] = []

        async def on_llm_new_token(self, token: str, **kwargs: object) -> None:
            self.tokens.append(token)

    fake_llm.script(Reply(content="one two three"))
    handler = Tokens()
    reply = await complete(
        gateway_for(tmp_path, path, fake_llm).chat_model(), HELLO, {"callbacks": [handler]}
    )
    assert reply.content == "one two three"
    assert "".join(handler.tokens) == "one two three"
