"""What one model call costs the caller: CPU of the calling thread per streamed call.

The same request (a ~1,000-token system prompt, three tools, a streamed reply of a dozen
chunks) goes to the scripted server, which runs in a process of its own, through:
Skilldesk's gateway (an OpenAI-compatible profile: aiohttp, events read as JSON), the same
gateway with a litellm-only provider name (litellm's ``acompletion``), the same gateway with
a LangChain profile (``provider: langchain``: ``ChatOpenAI`` inside the gateway, over chat
completions and over the Responses API), the litellm Router the gateway used before, and
LangChain's ``ChatOpenAI`` alone (the OpenAI SDK). Each is called through LangChain's
``astream``, as the graph calls it. Median over 60 calls after 10.
Run: .venv/bin/python -m bench.model_client
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

from langchain_core.messages import HumanMessage, SystemMessage

from agents.models import ModelGateway
from agents.models.config import ModelProfile, ModelsConfig
from tests.fakellm import Reply
from tests.fakellm.process import FakeLLMProcess

CALLS = 60
WARM_UP = 10
MESSAGES = [
    SystemMessage("You answer with the skill below. " + "Look up the record first. " * 150),
    HumanMessage("what is the status of record 7?"),
]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": f"look_up_{i}",
            "description": "Look up a record by its id and return its fields. " * 3,
            "parameters": {
                "type": "object",
                "properties": {"record_id": {"type": "string", "description": "the id"}},
                "required": ["record_id"],
            },
        },
    }
    for i in range(3)
]
REPLY = Reply(content="Record 7 is active, last changed on Monday, nothing is pending for it.")


async def per_call(fake: FakeLLMProcess, model: Any) -> tuple[float, float]:
    """Median calling-thread CPU ms and wall ms per streamed call."""
    bound = model.bind_tools(TOOLS)
    cpu: list[float] = []
    wall: list[float] = []
    for _ in range(WARM_UP + CALLS):
        fake.reset()
        fake.script(REPLY)
        c0, w0 = time.thread_time(), time.perf_counter()
        async for _chunk in bound.astream(MESSAGES):
            pass
        cpu.append((time.thread_time() - c0) * 1000)
        wall.append((time.perf_counter() - w0) * 1000)
    return statistics.median(cpu[WARM_UP:]), statistics.median(wall[WARM_UP:])


def _gateway(model: str, base_url: str, **settings: Any) -> ModelGateway:
    profile = ModelProfile(model=model, api_base=base_url, retries=0, **settings)
    return ModelGateway(ModelsConfig(default="bench", profiles={"bench": profile}))


def _litellm_router(base_url: str) -> Any:
    """The gateway's former design: a litellm Router behind a LangChain chat model."""
    from langchain_core.language_models.chat_models import BaseChatModel
    from langchain_core.messages import AIMessageChunk, convert_to_openai_messages
    from langchain_core.outputs import ChatGenerationChunk, ChatResult
    from litellm.router import Router

    router = Router(
        model_list=[
            {
                "model_name": "bench",
                "litellm_params": {"model": "openai/fake", "api_base": base_url, "api_key": "x"},
            }
        ],
        disable_cooldowns=True,
    )

    class RouterChat(BaseChatModel):
        @property
        def _llm_type(self) -> str:
            return "litellm-router"

        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self.bind(tools=tools, **kwargs)

        def _generate(self, *args: Any, **kwargs: Any) -> ChatResult:
            raise NotImplementedError

        async def _astream(self, messages: Any, stop: Any = None, **kwargs: Any) -> Any:
            stream = await router.acompletion(
                model="bench",
                messages=[convert_to_openai_messages(m) for m in messages],
                stream=True,
                stream_options={"include_usage": True},
                **kwargs,
            )
            async for raw in stream:
                text = raw.choices[0].delta.content if raw.choices else ""
                yield ChatGenerationChunk(message=AIMessageChunk(content=text or ""))

    return RouterChat()


async def amain() -> dict[str, tuple[float, float]]:
    from langchain_openai import ChatOpenAI

    with FakeLLMProcess() as fake:
        gateway = _gateway("openai/fake", fake.base_url)
        via_litellm = _gateway("hosted_vllm/fake", fake.base_url)
        via_langchain = _gateway("openai:fake", fake.base_url, provider="langchain")
        via_responses = _gateway(
            "openai:fake",
            fake.base_url,
            provider="langchain",
            kwargs={"use_responses_api": True},
        )
        clients: dict[str, Callable[[], Any]] = {
            "Skilldesk gateway (aiohttp)": gateway.chat_model,
            "gateway, litellm provider": via_litellm.chat_model,
            "gateway, LangChain profile": via_langchain.chat_model,
            "gateway, LangChain Responses": via_responses.chat_model,
            "litellm Router (before)": lambda: _litellm_router(fake.base_url),
            "ChatOpenAI (OpenAI SDK)": lambda: ChatOpenAI(
                model="fake",
                base_url=fake.base_url,
                api_key="x",  # type: ignore[arg-type]
                max_retries=0,
                streaming=True,
            ),
        }
        results: dict[str, tuple[float, float]] = {}
        for name, make in clients.items():
            results[name] = await per_call(fake, make())
        closing: list[Awaitable[None]] = [
            g.aclose() for g in (gateway, via_litellm, via_langchain, via_responses)
        ]
        await asyncio.gather(*closing)
    ours = results["Skilldesk gateway (aiohttp)"][0]
    print("model client per streamed call: calling-thread CPU ms / wall ms (server included)")
    for name, (cpu, wall) in results.items():
        ratio = f"{cpu / ours:.1f}x" if name != "Skilldesk gateway (aiohttp)" else "baseline"
        print(f"{name:<32}{cpu:>8.2f}{wall:>10.2f}   {ratio}")
    return results


def main() -> dict[str, tuple[float, float]]:
    return asyncio.run(amain())


if __name__ == "__main__":
    main()
