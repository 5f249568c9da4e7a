"""Reading a provider's streamed reply: server-sent events to chunk dicts, and its faults."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from agents.errors import StreamError, UnreadableReply
from agents.models.errors import retry_delay, to_model_error
from agents.models.transports.replies import AsyncEvents, Events
from tests.fakellm import FakeLLM, Reply

if TYPE_CHECKING:
    from agents.models import ModelGateway


class Response:
    """The part of an HTTP response the readers use: its lines, and close."""

    def __init__(self, text: str) -> None:
        self.lines = text.split("\n")
        self.closed = False

    async def reads(self, together: int = 1) -> AsyncIterator[list[str]]:
        """The lines as network reads would give them, ``together`` lines a read."""
        for start in range(0, len(self.lines), together):
            yield self.lines[start : start + together]

    def iter_lines(self) -> list[str]:
        return self.lines

    async def aclose(self) -> None:
        self.closed = True

    def close(self) -> None:
        self.closed = True


def _async(
    response: Response,
) -> tuple[AsyncIterator[list[str]], Callable[[], Awaitable[None]]]:
    return response.reads(), response.aclose


STREAM = (
    ": keep-alive comment\n\n"
    'data: {"choices": [{"delta": {"content": "Hel"}}]}\n\n'
    "event: message\n"
    'data: {"choices": [{"delta":\n'
    'data:  {"content": "lo"}}]}\n\n'
    'data: {"choices": [], "usage": {"prompt_tokens": 3}}\n\n'
    "data: [DONE]\n\n"
    'data: {"never": "read"}\n\n'
)


async def test_events_become_chunks_until_done() -> None:
    response = Response(STREAM)
    events = AsyncEvents(response.reads(), response.aclose)
    chunks = [chunk async for chunk in events]
    assert [c["choices"][0]["delta"]["content"] for c in chunks[:2]] == ["Hel", "lo"]
    assert chunks[2]["usage"] == {"prompt_tokens": 3}
    assert len(chunks) == 3  # nothing after [DONE]
    await events.close()
    assert response.closed


PIECES = (
    'data: {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}\n\n'
    'data: {"choices": [{"index": 0, "delta": {"content": "It "}}]}\n\n'
    'data: {"choices": [{"index": 0, "delta": {"content": "ships"}}]}\n\n'
    'data: {"choices": [{"index": 0, "delta": {"content": " today"}}]}\n\n'
    'data: {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "c1"}]}}]}\n\n'
    'data: {"choices": [{"index": 0, "delta": {"content": "."}}]}\n\n'
    'data: {"choices": [{"index": 0, "delta": {"content": ""}, "finish_reason": "stop"}]}\n\n'
    'data: {"choices": [], "usage": {"prompt_tokens": 3}}\n\n'
    "data: [DONE]\n\n"
)


async def test_text_pieces_of_one_read_become_one_chunk_and_nothing_else_is_joined() -> None:
    response = Response(PIECES)
    at_once = [c async for c in AsyncEvents(response.reads(len(response.lines)), response.aclose)]
    deltas = [c["choices"][0]["delta"] if c["choices"] else None for c in at_once]
    assert deltas[0] == {"role": "assistant", "content": "It ships today"}
    assert deltas[1] == {"tool_calls": [{"index": 0, "id": "c1"}]}  # never joined
    assert deltas[2] == {"content": "."}
    assert at_once[3]["choices"][0]["finish_reason"] == "stop"  # its own chunk
    assert at_once[4]["usage"] == {"prompt_tokens": 3}
    assert len(at_once) == 5
    # Read apart (two lines make one event), the pieces stay apart: the stream stays live.
    apart = [c async for c in AsyncEvents(response.reads(2), response.aclose)]
    assert len(apart) == 8
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in apart[:6]) == (
        "It ships today."
    )


def test_blocking_reader_reads_the_same() -> None:
    chunks = list(Events(iter(Response(STREAM).iter_lines()), lambda: None))
    assert len(chunks) == 3
    assert chunks[1]["choices"][0]["delta"]["content"] == "lo"


async def test_an_error_event_mid_stream_raises_with_the_servers_message() -> None:
    text = (
        'data: {"choices": [{"delta": {"content": "a"}}]}\n\n'
        'event: error\ndata: {"error": {"message": "overloaded"}}\n\n'
    )
    events = AsyncEvents(*_async(Response(text)))
    assert (await anext(aiter(events)))["choices"][0]["delta"]["content"] == "a"
    with pytest.raises(StreamError, match="overloaded"):
        await anext(aiter(events))


async def test_a_reply_that_is_not_json_is_named_as_such() -> None:
    events = AsyncEvents(*_async(Response("data: <html>Bad Gateway</html>\n\n")))
    with pytest.raises(UnreadableReply) as info:
        await anext(aiter(events))
    error = to_model_error(info.value, "main", ["main", "backup"])
    assert error.code == "model_bad_reply"
    assert "<html>Bad Gateway</html>" in error.detail
    assert "'main' → 'backup'" in error.detail
    assert "<html>" not in error.message
    assert retry_delay(info.value) is None  # the next profile, not the same again


def test_openai_itself_gets_max_completion_tokens_and_compatible_servers_max_tokens() -> None:
    from agents.models.config import ModelProfile
    from agents.models.transports import OpenAITransport

    request = {"messages": [], "max_tokens": 300}
    openai = OpenAITransport(ModelProfile(model="openai/o3-mini"), "sk-x", environ={})
    local = OpenAITransport(
        ModelProfile(model="qwen2.5", api_base="http://127.0.0.1:11434/v1"), None, environ={}
    )
    assert openai.url == "https://api.openai.com/v1/chat/completions"
    assert openai.body(request) == {
        "model": "o3-mini",
        "messages": [],
        "max_completion_tokens": 300,
    }
    assert local.body(request) == {"model": "qwen2.5", "messages": [], "max_tokens": 300}
    assert request == {"messages": [], "max_tokens": 300}  # the caller's request is untouched


@pytest.mark.parametrize(
    "data",
    [
        '{"choices": "nope"}',
        '{"choices": [{"delta": "text"}]}',
        '{"choices": [42]}',
    ],
)
async def test_a_chunk_of_the_wrong_shape_is_named_as_such(data: str) -> None:
    events = AsyncEvents(*_async(Response(f"data: {data}\n\n")))
    with pytest.raises(UnreadableReply, match="without choices"):
        await anext(aiter(events))


async def test_the_environments_proxy_carries_calls_and_a_netrc_entry_does_not_clash(
    fake_llm: FakeLLM, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # The proxy is read from the environment once, not (with ~/.netrc) for every call; a
    # netrc entry for the model's host made aiohttp refuse the key's Authorization header.
    from agents.models.config import ModelProfile
    from agents.models.transports import OpenAITransport

    netrc = tmp_path / "netrc"
    netrc.write_text("machine models.invalid login someone password secret\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    for name in ("http_proxy", "no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", fake_llm.base_url.removesuffix("/v1"))  # it answers as one
    profile = ModelProfile(model="openai/fake-model", api_base="http://models.invalid/v1")
    transport = OpenAITransport(profile, "sk-test", environ={})
    fake_llm.script(Reply(content="through the proxy"), Reply(content="again"))
    try:
        for expected in ("through the proxy", "again"):
            reply = await transport.acreate({"messages": [{"role": "user", "content": "hi"}]})
            assert reply["choices"][0]["message"]["content"] == expected
    finally:
        await transport.aclose()
    assert [h.get("authorization") for h in fake_llm.headers] == ["Bearer sk-test"] * 2


async def test_text_read_together_with_an_error_event_reaches_the_reader_before_the_error() -> None:
    text = (
        'data: {"choices": [{"delta": {"content": "Hel"}}]}\n\n'
        'data: {"choices": [{"delta": {"content": "lo"}}]}\n\n'
        'event: error\ndata: {"error": {"message": "overloaded"}}\n\n'
    )
    response = Response(text)
    events = AsyncEvents(response.reads(len(response.lines)), response.aclose)  # one read
    assert (await anext(aiter(events)))["choices"][0]["delta"]["content"] == "Hello"
    with pytest.raises(StreamError, match="overloaded"):
        await anext(aiter(events))


async def test_calls_are_not_held_to_a_hundred_connections(fake_llm: FakeLLM) -> None:
    # aiohttp's own pool opens 100 connections: with a model taking seconds a call, the 101st
    # call of a busy service waited for a free one (a p99 of 345 ms in bench/load at 42
    # turns/s). The profile's limit applies instead (1000, as the OpenAI SDK and litellm).
    import asyncio

    from agents.models.config import ModelProfile
    from agents.models.transports import OpenAITransport

    calls = 120
    fake_llm.script(*[Reply(content="hi", together=calls, hold_timeout=3) for _ in range(calls)])
    transport = OpenAITransport(
        ModelProfile(model="openai/fake-model", api_base=fake_llm.base_url), "sk-test", {}
    )
    capped = OpenAITransport(
        ModelProfile(model="openai/fake-model", api_base=fake_llm.base_url, max_connections=2),
        "sk-test",
        {},
    )
    request = {"messages": [{"role": "user", "content": "hi"}]}
    try:
        await asyncio.gather(*[transport.acreate(request) for _ in range(calls)])
        fake_llm.script(*[Reply(content="hi", delay=0.1) for _ in range(6)])
        await asyncio.gather(*[capped.acreate(request) for _ in range(6)])
    finally:
        await transport.aclose()
        await capped.aclose()

    assert most_at_once(fake_llm.answering[:calls]) == calls
    assert most_at_once(fake_llm.answering[calls:]) == 2


def most_at_once(spans: list[tuple[float, float]]) -> int:
    """The most of ``spans`` (the server answering each request) open at one moment."""
    marks = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])
    open_now, most = 0, 0
    for _, step in marks:
        open_now += step
        most = max(most, open_now)
    return most


async def test_a_litellm_profile_keeps_to_its_max_connections_streams_included(
    fake_llm: FakeLLM,
) -> None:
    # litellm's clients are its own and shared, with no cap per call: the setting was
    # silently ignored for every provider but OpenAI's API.
    import asyncio

    from agents.models.config import ModelProfile
    from agents.models.transports import LiteLLMTransport, aclose_stream

    profile = ModelProfile(
        model="hosted_vllm/vllm-model", api_base=fake_llm.base_url, max_connections=2
    )
    transport = LiteLLMTransport(profile, "sk-test")
    request = {"messages": [{"role": "user", "content": "hi"}]}
    fake_llm.script(*[Reply(content="hi", delay=0.1) for _ in range(6)])
    await asyncio.gather(*[transport.acreate(request) for _ in range(6)])
    assert most_at_once(fake_llm.answering) == 2

    async def streamed() -> str:
        stream = await transport.acreate({**request, "stream": True})
        try:
            parts = [c["choices"][0]["delta"].get("content") or "" async for c in stream]
            return "".join(parts)
        finally:
            await aclose_stream(stream)

    fake_llm.reset()
    fake_llm.script(*[Reply(content="a streamed reply", stream_chunk_delay=0.03) for _ in range(4)])
    assert await asyncio.gather(*[streamed() for _ in range(4)]) == ["a streamed reply"] * 4
    assert most_at_once(fake_llm.answering) == 2
    # Every slot came back: as many calls as the cap go at once again.
    fake_llm.reset()
    fake_llm.script(*[Reply(content="hi", together=2, hold_timeout=3) for _ in range(2)])
    await asyncio.wait_for(asyncio.gather(*[transport.acreate(request) for _ in range(2)]), 10)
    assert most_at_once(fake_llm.answering) == 2


def test_a_langchain_profile_keeps_to_its_max_connections_on_the_blocking_path_too(
    fake_llm: FakeLLM,
) -> None:
    # The async pool was capped, the blocking one kept the SDK's default (1000).
    from concurrent.futures import ThreadPoolExecutor

    from agents.models.config import ModelProfile
    from agents.models.langchain_transport import LangChainTransport

    profile = ModelProfile(
        provider="langchain",
        model="openai:fake-model",
        api_base=fake_llm.base_url,
        max_connections=2,
    )
    transport = LangChainTransport(profile, "sk-test")
    request = {"messages": [{"role": "user", "content": "hi"}]}
    fake_llm.script(*[Reply(content="hi", delay=0.1) for _ in range(6)])
    with ThreadPoolExecutor(6) as pool:
        replies = list(pool.map(lambda _: transport.create(request), range(6)))
    assert [r["choices"][0]["message"]["content"] for r in replies] == ["hi"] * 6
    assert most_at_once(fake_llm.answering) == 2


# The waits for a free slot of a profile's max_connections are the service's own queue, not
# the model server's time: over each path, a call that waited behind another is neither cut
# off by its attempt's timeout nor retried. (The fake server answers each call in SERVER_S,
# the profile allows TIMEOUT_S: a call that waited for the one slot and then for the server
# takes longer than that.)
SERVER_S = 0.45
TIMEOUT_S = 0.8
CAPPED_PATHS = {
    "direct": {"model": "openai/fake-model"},
    "litellm": {"model": "hosted_vllm/fake-model"},
    "langchain": {"provider": "langchain", "model": "openai:fake-model"},
}
HI = {"messages": [{"role": "user", "content": "hi"}]}


async def until(condition: Callable[[], bool], within: float = 5.0) -> None:
    """Wait (polling) until ``condition`` holds; fail after ``within`` seconds."""
    import asyncio

    for _ in range(int(within / 0.01)):
        if condition():
            return
        await asyncio.sleep(0.01)
    pytest.fail(f"still not so after {within} s")


@pytest.fixture(params=sorted(CAPPED_PATHS))
async def one_slot(
    request: pytest.FixtureRequest, fake_llm: FakeLLM
) -> AsyncIterator[ModelGateway]:
    """A gateway whose profile 'main' (over the path of the test) takes one call at a time,
    with TIMEOUT_S an attempt and no retry (a timed-out call fails the test)."""
    from agents.models import ModelGateway
    from agents.models.config import ModelProfile, ModelsConfig

    profile = ModelProfile(
        **CAPPED_PATHS[request.param],
        api_base=fake_llm.base_url,
        max_connections=1,
        timeout_s=TIMEOUT_S,
        retries=0,
    )

    def gateway_of(profile: ModelProfile) -> ModelGateway:
        return ModelGateway(ModelsConfig(default="main", profiles={"main": profile}), environ={})

    # A path's first call in a process imports what it needs (over a second for litellm's),
    # a gateway's first call builds its client: neither is the server's time, so both are
    # made here, answered at once (the first one unhurried).
    warm, gateway = gateway_of(profile.model_copy(update={"timeout_s": 30.0})), gateway_of(profile)
    fake_llm.script(Reply(content="warm"), Reply(content="warm"))
    await warm.acomplete("main", HI)
    await gateway.acomplete("main", HI)
    await warm.aclose()
    fake_llm.reset()
    try:
        yield gateway
    finally:
        await gateway.aclose()


async def test_a_call_that_waited_for_a_free_connection_is_not_timed_out_for_the_wait(
    one_slot: ModelGateway, fake_llm: FakeLLM
) -> None:
    import asyncio

    fake_llm.script(Reply(content="first", delay=SERVER_S), Reply(content="second", delay=SERVER_S))
    replies = await asyncio.gather(one_slot.acomplete("main", HI), one_slot.acomplete("main", HI))
    assert sorted(r["choices"][0]["message"]["content"] for r in replies) == ["first", "second"]
    assert len(fake_llm.requests) == 2
    assert most_at_once(fake_llm.answering) == 1


async def test_a_stream_holds_its_connection_until_closed_and_the_next_waits_untimed(
    one_slot: ModelGateway, fake_llm: FakeLLM
) -> None:
    import asyncio

    async def streamed() -> str:
        parts = [
            c["choices"][0]["delta"].get("content") or ""
            async for c in one_slot.astream("main", HI)
            if c["choices"]
        ]
        return "".join(parts)

    # Each stream: its first chunk after SERVER_S, the next ones 0.05 s apart.
    fake_llm.script(
        *[
            Reply(content="a streamed reply", delay=SERVER_S, stream_chunk_delay=0.05)
            for _ in range(2)
        ]
    )
    assert await asyncio.gather(streamed(), streamed()) == ["a streamed reply"] * 2
    assert len(fake_llm.requests) == 2
    assert most_at_once(fake_llm.answering) == 1


async def test_a_call_cancelled_while_it_waits_for_a_connection_gives_back_nothing_it_did_not_take(
    one_slot: ModelGateway, fake_llm: FakeLLM
) -> None:
    import asyncio

    fake_llm.script(*[Reply(content="hi", delay=SERVER_S / 2) for _ in range(3)])
    holding = asyncio.create_task(one_slot.acomplete("main", HI))
    await until(lambda: bool(fake_llm.requests))  # the first call holds the one slot
    waiting = asyncio.create_task(one_slot.acomplete("main", HI))
    await asyncio.sleep(0.05)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    await holding
    # Still one at a time (no slot given back twice), and the slot came back (none lost).
    await asyncio.wait_for(
        asyncio.gather(one_slot.acomplete("main", HI), one_slot.acomplete("main", HI)), 5
    )
    assert len(fake_llm.requests) == 3  # the cancelled call never reached the server
    assert most_at_once(fake_llm.answering) == 1


async def test_a_stream_cancelled_before_its_first_chunk_gives_its_connection_back(
    one_slot: ModelGateway, fake_llm: FakeLLM
) -> None:
    import asyncio

    async def first_chunk() -> object:
        async for chunk in one_slot.astream("main", HI):
            return chunk
        return None

    fake_llm.script(Reply(content="late", delay=SERVER_S), Reply(content="next"))
    reading = asyncio.create_task(first_chunk())
    await until(lambda: bool(fake_llm.requests))  # the stream's request is at the server
    reading.cancel()
    with pytest.raises(asyncio.CancelledError):
        await reading
    reply = await asyncio.wait_for(one_slot.acomplete("main", HI), 2 * SERVER_S + 1)
    assert reply["choices"][0]["message"]["content"] == "next"
    # The server answers the cancelled request all the same: its time is not the next test's.
    await until(lambda: len(fake_llm.answering) == 2)


async def test_blocking_calls_that_waited_for_a_free_connection_are_not_timed_out_for_the_wait(
    one_slot: ModelGateway, fake_llm: FakeLLM
) -> None:
    # The third call waits for two before it (longer than the timeout) in the pool: the
    # pool's own timeout must not count that wait.
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    fake_llm.script(*[Reply(content="hi", delay=SERVER_S) for _ in range(3)])
    with ThreadPoolExecutor(3) as pool:
        calls = [asyncio.wrap_future(pool.submit(one_slot.complete, "main", HI)) for _ in range(3)]
        replies = await asyncio.gather(*calls)
    assert [r["choices"][0]["message"]["content"] for r in replies] == ["hi"] * 3
    assert len(fake_llm.requests) == 3
    assert most_at_once(fake_llm.answering) == 1
