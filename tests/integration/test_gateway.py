"""The model gateway over real HTTP: profiles → the OpenAI SDK or litellm → scripted server,
through LangChain; retries and fallbacks across both."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, AIMessageChunk, HumanMessage

from agents.errors import ModelError
from agents.models import ModelGateway, load_models_config
from agents.models.gateway import RETRY_BASE_S, RETRY_MAX_S, retry_backoff
from tests.fakellm import FakeLLM, Reply, ToolCall

HELLO = [HumanMessage(content="hello")]
_OPENED: list[ModelGateway] = []


@pytest.fixture(autouse=True)
async def _close_gateways() -> AsyncIterator[None]:
    """Each test's gateways close their connection pools, as the service does on exit."""
    yield
    while _OPENED:
        await _OPENED.pop().aclose()


def gateway_for(
    tmp_path: Path,
    primary: FakeLLM,
    backup: FakeLLM | None = None,
    timeout: float = 5.0,
    retries: int = 1,
    backup_model: str = "openai/backup-model",
    stream_limit: float = 600.0,
) -> ModelGateway:
    text = f"""
default: main
profiles:
  main:
    model: openai/fake-model
    api_base: {primary.base_url}/
    api_key_env: FAKE_KEY
    timeout_s: {timeout}
    stream_limit_s: {stream_limit}
    retries: {retries}
    {"fallbacks: [backup]" if backup else ""}
"""
    if backup:
        text += f"""
  backup:
    model: {backup_model}
    api_base: {backup.base_url}
    retries: 0
"""
    path = tmp_path / "models.yaml"
    path.write_text(text, encoding="utf-8")
    env = {"FAKE_KEY": "sk-fake\n"}
    gateway = ModelGateway(load_models_config(models_file=path, environ=env), environ=env)
    _OPENED.append(gateway)
    return gateway


async def test_answer_comes_from_the_model_server_with_usage_recorded(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    fake_llm.script(
        Reply(
            content="Hi there",
            usage={"prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9},
        )
    )
    gateway = gateway_for(tmp_path, fake_llm)
    reply = await gateway.chat_model().ainvoke(HELLO)
    assert isinstance(reply, AIMessage)
    assert reply.content == "Hi there"
    assert reply.usage_metadata == {"input_tokens": 7, "output_tokens": 2, "total_tokens": 9}
    assert gateway.usage.totals() == {"main": {"calls": 1, "input_tokens": 7, "output_tokens": 2}}
    request = fake_llm.requests[0]
    assert request["model"] == "fake-model"
    assert request["messages"] == [{"role": "user", "content": "hello"}]


async def test_streaming_yields_several_chunks_and_usage(tmp_path: Path, fake_llm: FakeLLM) -> None:
    fake_llm.script(Reply(content="one two three four", stream_chunk_delay=0.02))
    gateway = gateway_for(tmp_path, fake_llm)
    chunks = [c async for c in gateway.chat_model().astream(HELLO)]
    assert all(isinstance(c, AIMessageChunk) for c in chunks)
    assert len([c for c in chunks if c.content]) >= 3
    assert "".join(str(c.content) for c in chunks) == "one two three four"
    assert fake_llm.requests[0]["stream_options"] == {"include_usage": True}
    assert gateway.usage.totals()["main"]["calls"] == 1


async def test_calls_reuse_one_connection(tmp_path: Path, fake_llm: FakeLLM) -> None:
    # A stream read only up to its [DONE] event would drop its connection: every call would
    # then pay for a new one.
    fake_llm.script(Reply(content="one two"), Reply(content="three"), Reply(content="four"))
    model = gateway_for(tmp_path, fake_llm).chat_model()
    for _ in range(2):
        assert [c async for c in model.astream(HELLO)]
    assert (await model.ainvoke(HELLO)).content == "four"
    assert len(set(fake_llm.peers)) == 1


async def test_a_stream_closed_half_read_leaves_the_model_usable(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    # A client that goes away mid-answer: the stream is closed where it stands, and the
    # next call is answered as usual.
    fake_llm.script(Reply(content="one two three four five", stream_chunk_delay=0.05))
    fake_llm.script(Reply(content="next"))
    model = gateway_for(tmp_path, fake_llm).chat_model()
    stream = model.astream(HELLO)
    assert (await anext(stream)).content is not None
    await stream.aclose()
    assert (await model.ainvoke(HELLO)).content == "next"
    assert len(fake_llm.requests) == 2


async def test_bound_tools_produce_tool_calls(tmp_path: Path, fake_llm: FakeLLM) -> None:
    fake_llm.script(Reply(tool_calls=[ToolCall(name="get_order", arguments={"order_id": "A1"})]))
    tool = {
        "type": "function",
        "function": {
            "name": "get_order",
            "description": "Look up an order",
            "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}},
        },
    }
    model = gateway_for(tmp_path, fake_llm).chat_model().bind_tools([tool])
    reply = await model.ainvoke(HELLO)
    assert [(c["name"], c["args"]) for c in reply.tool_calls] == [("get_order", {"order_id": "A1"})]
    assert fake_llm.requests[0]["tools"][0]["function"]["name"] == "get_order"


async def test_malformed_tool_call_json_becomes_an_invalid_tool_call(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    fake_llm.script(Reply(tool_calls=[ToolCall(name="get_order", arguments='{"order_id": ')]))
    reply = await gateway_for(tmp_path, fake_llm).chat_model().ainvoke(HELLO)
    assert reply.tool_calls == []
    assert reply.invalid_tool_calls[0]["name"] == "get_order"
    assert reply.invalid_tool_calls[0]["args"] == '{"order_id": '


async def test_http_500_is_retried_after_a_short_pause_then_answers(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    fake_llm.script(Reply(status=500), Reply(content="second try"))
    reply = await gateway_for(tmp_path, fake_llm, retries=1).chat_model().ainvoke(HELLO)
    assert reply.content == "second try"
    assert len(fake_llm.requests) == 2
    # Not at once: a server failing now is given a moment (RETRY_BASE_S, less a random part).
    (_, failed), (again, _) = fake_llm.answering
    assert again - failed >= 0.75 * RETRY_BASE_S


def test_retries_wait_longer_each_time_with_a_random_part_and_a_ceiling() -> None:
    first = [retry_backoff(0) for _ in range(200)]
    second = [retry_backoff(1) for _ in range(200)]
    assert 0.75 * RETRY_BASE_S <= min(first) < max(first) <= RETRY_BASE_S
    assert min(second) >= 1.5 * RETRY_BASE_S
    assert max(second) <= 2 * RETRY_BASE_S
    assert max(retry_backoff(20) for _ in range(50)) <= RETRY_MAX_S


async def test_timeouts_fall_back_to_the_backup_profile(
    tmp_path: Path, fake_llm: FakeLLM, backup_llm: FakeLLM
) -> None:
    fake_llm.script(Reply(delay=3, content="late"), Reply(delay=3, content="late"))
    backup_llm.script(Reply(content="from backup"))
    gateway = gateway_for(tmp_path, fake_llm, backup_llm, timeout=0.3, retries=1)
    reply = await gateway.chat_model().ainvoke(HELLO)
    assert reply.content == "from backup"
    assert len(fake_llm.requests) == 2  # first try + one retry
    assert backup_llm.requests[0]["model"] == "backup-model"


async def test_streaming_falls_back_too(
    tmp_path: Path, fake_llm: FakeLLM, backup_llm: FakeLLM
) -> None:
    fake_llm.script(Reply(status=500), Reply(status=500))
    backup_llm.script(Reply(content="streamed backup"))
    gateway = gateway_for(tmp_path, fake_llm, backup_llm, retries=1)
    text = "".join([str(c.content) async for c in gateway.chat_model().astream(HELLO)])
    assert text == "streamed backup"


async def test_all_profiles_failing_gives_an_error_a_person_can_act_on(
    tmp_path: Path, fake_llm: FakeLLM, backup_llm: FakeLLM
) -> None:
    fake_llm.script(Reply(status=500), Reply(status=500))
    backup_llm.script(Reply(status=500))
    gateway = gateway_for(tmp_path, fake_llm, backup_llm, retries=1)
    with pytest.raises(ModelError) as info:
        await gateway.chat_model().ainvoke(HELLO)
    assert info.value.code == "model_unavailable"
    assert "'main' → 'backup'" in info.value.detail  # the operator's, logged
    assert "'main'" not in info.value.message  # the user's: what happened, what to do
    assert "try again" in info.value.message.lower()


async def test_unreachable_server_is_reported_as_unreachable(tmp_path: Path) -> None:
    fake = FakeLLM().start()
    gateway = gateway_for(tmp_path, fake, retries=0)
    fake.stop()  # nothing listens on its port any more
    with pytest.raises(ModelError) as info:
        await gateway.chat_model().ainvoke(HELLO)
    assert info.value.code in ("model_unreachable", "model_unavailable")
    assert "api_base" in info.value.detail or "try again" in info.value.detail.lower()
    assert "try again" in info.value.message.lower()


async def test_a_provider_other_than_openai_goes_through_litellm_in_the_same_chain(
    tmp_path: Path, fake_llm: FakeLLM, backup_llm: FakeLLM
) -> None:
    # main speaks the OpenAI API (the SDK); the fallback is litellm's vLLM provider.
    fake_llm.script(Reply(status=503), Reply(status=503))
    backup_llm.script(Reply(content="via litellm"), Reply(content="streamed via litellm"))
    gateway = gateway_for(
        tmp_path, fake_llm, backup_llm, retries=1, backup_model="hosted_vllm/vllm-model"
    )
    reply = await gateway.chat_model().ainvoke(HELLO)
    assert reply.content == "via litellm"
    fake_llm.script(Reply(status=503), Reply(status=503))
    text = "".join([str(c.content) async for c in gateway.chat_model().astream(HELLO)])
    assert text == "streamed via litellm"
    assert [r["model"] for r in backup_llm.requests] == ["vllm-model", "vllm-model"]
    assert len(fake_llm.requests) == 4  # two calls, each tried twice on main
    assert gateway.usage.totals()["main"]["calls"] == 2  # usage is recorded per chat model


async def test_a_refused_key_is_not_retried_but_falls_back(
    tmp_path: Path, fake_llm: FakeLLM, backup_llm: FakeLLM
) -> None:
    fake_llm.script(Reply(status=401), Reply(content="never asked"))
    fake_llm.allow_leftovers()  # the point: a retry would have had an answer waiting
    backup_llm.script(Reply(content="from backup"))
    gateway = gateway_for(tmp_path, fake_llm, backup_llm, retries=2)
    reply = await gateway.chat_model().ainvoke(HELLO)
    assert reply.content == "from backup"
    assert len(fake_llm.requests) == 1  # the same key would be refused again


async def test_a_refused_key_alone_says_to_check_the_key(tmp_path: Path, fake_llm: FakeLLM) -> None:
    fake_llm.script(Reply(status=401))
    with pytest.raises(ModelError) as info:
        await gateway_for(tmp_path, fake_llm, retries=2).chat_model().ainvoke(HELLO)
    assert info.value.code == "model_auth_failed"
    assert "key" in info.value.detail
    assert "scripted HTTP 401" in info.value.detail  # what the provider said, for the log
    # QA: a chat user read the provider's words ("Incorrect API key provided: sk-te**")
    # and the settings to check; they read what happened and whose it is to fix.
    assert "scripted HTTP 401" not in info.value.message
    assert "SKILLDESK_MODEL_API_KEY" not in info.value.message
    assert "operator" in info.value.message


async def test_openai_without_a_key_says_so_before_calling_anyone() -> None:
    config = load_models_config(model="openai/gpt-4o-mini", environ={})
    gateway = ModelGateway(config, environ={})  # no OPENAI_API_KEY, no api_base
    _OPENED.append(gateway)
    with pytest.raises(ModelError) as info:
        await gateway.chat_model().ainvoke(HELLO)
    assert info.value.code == "model_auth_failed"
    assert "OPENAI_API_KEY" in info.value.detail


async def test_a_refused_request_is_not_retried_and_says_what_the_provider_said(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    fake_llm.script(Reply(status=400, error_message="maximum context length is 8192 tokens"))
    with pytest.raises(ModelError) as info:
        await gateway_for(tmp_path, fake_llm, retries=2).chat_model().ainvoke(HELLO)
    assert info.value.code == "model_rejected_request"
    assert "maximum context length is 8192 tokens" in info.value.detail
    assert "8192" not in info.value.message
    assert "new thread" in info.value.message  # what the user can do
    assert len(fake_llm.requests) == 1


@pytest.mark.parametrize(
    ("status", "said", "advice"),
    [
        (400, "maximum context length is 8192 tokens", "start a new thread"),
        (400, "Unsupported parameter: 'temperature'", "operator must fix"),
        (422, "tools.0.function.parameters: invalid schema", "operator must fix"),
        (429, "You exceeded your current quota, check your billing", "operator must fix"),
    ],
)
async def test_what_the_user_is_told_to_do_fits_what_the_provider_refused(
    tmp_path: Path, fake_llm: FakeLLM, status: int, said: str, advice: str
) -> None:
    # Review: every 400 told the user to shorten the conversation (a parameter of the
    # service's is no fault of theirs), and a spent quota to try again in a moment.
    fake_llm.script(Reply(status=status, error_message=said))
    with pytest.raises(ModelError) as info:  # a spent quota is not tried again either
        await gateway_for(tmp_path, fake_llm, retries=2).chat_model().ainvoke(HELLO)
    assert advice in info.value.message
    assert said in info.value.detail
    assert said not in info.value.message


async def test_rate_limits_are_retried_after_a_pause(tmp_path: Path, fake_llm: FakeLLM) -> None:
    fake_llm.script(Reply(status=429), Reply(content="after the pause"))
    started = time.monotonic()
    reply = await gateway_for(tmp_path, fake_llm, retries=1).chat_model().ainvoke(HELLO)
    assert reply.content == "after the pause"
    assert time.monotonic() - started >= 0.4  # not hammered at once
    assert len(fake_llm.requests) == 2


async def test_the_last_rate_limited_attempt_fails_at_once(
    tmp_path: Path, fake_llm: FakeLLM, backup_llm: FakeLLM
) -> None:
    # No pause before moving on to the fallback: it has its own limits.
    fake_llm.script(Reply(status=429))
    backup_llm.script(Reply(content="from backup"))
    started = time.monotonic()
    gateway = gateway_for(tmp_path, fake_llm, backup_llm, retries=0)
    assert (await gateway.chat_model().ainvoke(HELLO)).content == "from backup"
    assert time.monotonic() - started < 0.4


async def test_a_stream_that_breaks_after_its_first_chunk_is_reported_not_retried(
    tmp_path: Path, fake_llm: FakeLLM, backup_llm: FakeLLM
) -> None:
    # Text already streamed to the user cannot be taken back: a retry would repeat it.
    fake_llm.script(Reply(content="one two three", stream_chunk_delay=2))
    gateway = gateway_for(tmp_path, fake_llm, backup_llm, timeout=0.3, retries=1)
    received: list[str] = []

    async def read() -> None:
        async for chunk in gateway.chat_model().astream(HELLO):
            received.append(str(chunk.content))

    with pytest.raises(ModelError) as info:
        await read()
    assert info.value.code == "model_timeout"
    assert len(fake_llm.requests) == 1
    assert not backup_llm.requests
    assert received  # the first chunk had arrived


def endless(pause: float, *, tokens: bool) -> Any:
    """A chat-completions route whose stream sends one token, then, forever, every
    ``pause`` seconds, a keep-alive comment (``tokens=False``) or another token."""
    from starlette.responses import StreamingResponse

    def chunk(text: str) -> str:
        delta = {"role": "assistant", "content": text}
        body = {"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": "m"}
        return "data: " + json.dumps({**body, "choices": [{"index": 0, "delta": delta}]}) + "\n\n"

    async def events() -> AsyncIterator[str]:
        yield chunk("la")
        while True:
            await asyncio.sleep(pause)
            yield chunk(" la") if tokens else ": keep-alive\n\n"

    return lambda _: StreamingResponse(events(), media_type="text/event-stream")


@pytest.mark.parametrize("tokens", [False, True], ids=["keep-alive", "tokens"])
async def test_a_reply_that_never_ends_is_cut_off_and_named(tmp_path: Path, tokens: bool) -> None:
    # A socket's read timeout never fires while bytes arrive: a stalled stream that sends
    # keep-alive comments, or one that sends tokens forever, held its run and thread for as
    # long as the connection lived.
    from tests.fakellm.server import Route

    with FakeLLM() as odd:
        odd._app.router.routes.insert(
            0, Route("/v1/chat/completions", endless(0.1, tokens=tokens), methods=["POST"])
        )
        gateway = gateway_for(tmp_path, odd, timeout=0.5, retries=1, stream_limit=1.5)
        received: list[str] = []

        async def read() -> None:
            async for chunk in gateway.chat_model().astream(HELLO):
                received.append(str(chunk.content))

        started = time.monotonic()
        with pytest.raises(ModelError) as info:
            await asyncio.wait_for(read(), 10)  # without the cut: a TimeoutError here
        took = time.monotonic() - started
    assert info.value.code == "model_timeout"
    if tokens:  # 0.1 s apart: never 0.5 s of silence, but 1.5 s in all
        assert "went on past 1.5 s" in info.value.detail
        assert 1.4 < took < 5, took
        assert len(received) > 5
    else:
        assert "stopped for 0.5 s mid-way" in info.value.detail
        assert 0.4 < took < 4, took
        assert "".join(received) == "la"
    assert "send the message again" in info.value.message


async def test_a_stream_without_a_choice_is_a_bad_reply_not_an_empty_answer(
    tmp_path: Path,
) -> None:
    # Events, but none with a choice (an empty list, then usage): the user got an empty
    # answer with 200 OK, stored in the thread.
    from starlette.responses import StreamingResponse

    from tests.fakellm.server import Route

    body = {"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": "m"}
    usage = {"prompt_tokens": 3, "completion_tokens": 0, "total_tokens": 3}
    events = [
        "data: " + json.dumps({**body, "choices": []}) + "\n\n",
        "data: " + json.dumps({**body, "choices": [], "usage": usage}) + "\n\n",
        "data: [DONE]\n\n",
    ]
    with FakeLLM() as odd:
        odd._app.router.routes.insert(
            0,
            Route(
                "/v1/chat/completions",
                lambda _: StreamingResponse(iter(events), media_type="text/event-stream"),
                methods=["POST"],
            ),
        )
        model = gateway_for(tmp_path, odd, retries=0).chat_model()

        async def read() -> list[Any]:
            return [chunk async for chunk in model.astream(HELLO)]

        with pytest.raises(ModelError) as info:
            await read()
    assert info.value.code == "model_bad_reply"
    assert "ended without a reply" in info.value.detail


async def test_a_stream_with_no_events_is_a_bad_reply_not_an_empty_answer(
    tmp_path: Path,
) -> None:
    # Something that answers 200 but speaks no server-sent events (a misconfigured proxy).
    from starlette.responses import PlainTextResponse

    from tests.fakellm.server import Route

    with FakeLLM() as odd:
        odd._app.router.routes.insert(
            0, Route("/v1/chat/completions", lambda _: PlainTextResponse("OK"), methods=["POST"])
        )
        model = gateway_for(tmp_path, odd, retries=0).chat_model()
        with pytest.raises(ModelError) as whole:
            await model.ainvoke(HELLO)
        with pytest.raises(ModelError) as streamed:
            await anext(aiter(model.astream(HELLO)))
    assert whole.value.code == streamed.value.code == "model_bad_reply"
    assert "is not JSON: 'OK'" in whole.value.detail
    assert "without a single event" in streamed.value.detail


async def test_an_error_sent_with_status_200_is_reported_as_such(tmp_path: Path) -> None:
    from starlette.responses import JSONResponse

    from tests.fakellm.server import Route

    body = {"error": {"message": "quota exhausted for this key"}}
    with FakeLLM() as odd:
        odd._app.router.routes.insert(
            0, Route("/v1/chat/completions", lambda _: JSONResponse(body), methods=["POST"])
        )
        with pytest.raises(ModelError) as info:
            await gateway_for(tmp_path, odd, retries=0).chat_model().ainvoke(HELLO)
    assert info.value.code == "model_bad_reply"
    assert "quota exhausted for this key" in info.value.detail


def test_blocking_calls_retry_and_fall_back_too(
    tmp_path: Path, fake_llm: FakeLLM, backup_llm: FakeLLM
) -> None:
    fake_llm.script(Reply(status=500), Reply(status=500), Reply(status=500), Reply(status=500))
    backup_llm.script(Reply(content="blocking backup"), Reply(content="blocking stream"))
    gateway = gateway_for(tmp_path, fake_llm, backup_llm, retries=1)
    assert gateway.chat_model().invoke(HELLO).content == "blocking backup"
    assert "".join(str(c.content) for c in gateway.chat_model().stream(HELLO)) == (
        "blocking stream"
    )
    assert len(fake_llm.requests) == 4
