"""Reasoning models and what model calls cost, through the service's HTTP surface: a
reasoning summary reaches the run's trace as its own event, never the answer or the thread's
messages; reasoning tokens and costs add up per run and per thread."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from tests.fakellm import FakeLLM, Reply

SUMMARY = "The user greets me; a short greeting back is enough."


def events_of(text: str) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for block in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines())
        out.append((lines["event"], json.loads(lines["data"])))
    return out


@pytest.fixture
def responses_client(make_settings: Any, fake_llm: FakeLLM, tmp_path: Path) -> Iterator[TestClient]:
    """The service with one profile: ChatOpenAI on the Responses API, reasoning summaries on."""
    models = tmp_path / "models.yaml"
    models.write_text(
        f"""
profiles:
  default:
    provider: langchain
    model: "openai:gpt-5-mini"
    api_base: {fake_llm.base_url}
    reasoning_effort: low
    kwargs:
      use_responses_api: true
      reasoning: {{summary: auto}}
""",
        encoding="utf-8",
    )
    with TestClient(create_app(make_settings(models_file=models))) as client:
        yield client


def test_a_reasoning_summary_reaches_the_trace_and_not_the_answer(
    responses_client: TestClient, fake_llm: FakeLLM
) -> None:
    fake_llm.script(Reply(content="Hello! How can I help?", reasoning=SUMMARY))
    response = responses_client.post("/v1/threads/r-1/runs/stream", json={"message": "hi"})
    events = events_of(response.text)
    thinking = "".join(data["text"] for name, data in events if name == "reasoning_summary")
    answer = "".join(data["text"] for name, data in events if name == "token")
    assert thinking == SUMMARY
    assert answer == "Hello! How can I help?"
    assert events[-1][0] == "run_finished"
    assert events[-1][1]["answer"] == "Hello! How can I help?"
    assert events[-1][1]["usage"]["reasoning_tokens"] > 0
    body = fake_llm.requests[0]
    assert fake_llm.paths[0] == "/v1/responses"
    assert body["reasoning"] == {"effort": "low", "summary": "auto"}
    messages = responses_client.get("/v1/threads/r-1").json()["messages"]
    assert [m["content"] for m in messages] == ["hi", "Hello! How can I help?"]
    assert SUMMARY not in json.dumps(messages)


def priced_profiles(tmp_path: Path, primary: FakeLLM, backup: FakeLLM | None = None) -> Path:
    text = f"""
profiles:
  default:
    model: openai/fake-model
    api_base: {primary.base_url}
    retries: 0
    price: {{input: 2.0, output: 10.0}}
    {"fallbacks: [backup]" if backup else ""}
"""
    if backup:
        text += f"""
  backup:
    model: openai/gpt-4o-mini
    api_base: {backup.base_url}
"""
    path = tmp_path / "models.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def usage(prompt: int, completion: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def test_costs_add_up_per_run_and_per_thread_to_the_sum_of_the_calls(
    make_settings: Any, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    # $2 and $10 per million tokens: a call's cost in millionths of a dollar is
    # 2 x input tokens + 10 x output tokens.
    fake_llm.script(
        Reply(content="First.", usage=usage(1000, 200)),  # 2,000 + 2,000
        Reply(content="Second.", usage=usage(1500, 50)),  # 3,000 + 500
    )
    settings = make_settings(models_file=priced_profiles(tmp_path, fake_llm))
    with TestClient(create_app(settings)) as client:
        before = _cost_metric(client.get("/metrics").text)
        runs = [
            events_of(client.post("/v1/threads/c-1/runs/stream", json={"message": text}).text)
            for text in ("one", "two")
        ]
        thread = client.get("/v1/threads/c-1").json()
        after = _cost_metric(client.get("/metrics").text)
    per_run = [run[-1][1]["usage"]["cost_micro_usd"] for run in runs]
    assert per_run == [4000, 3500]
    assert thread["usage"]["cost_micro_usd"] == 7500
    assert thread["usage"]["model_calls"] == 2
    assert after - before == 7500  # the metrics count the same cost


def _cost_metric(text: str) -> float:
    """``skilldesk_model_cost_micro_usd_total`` of the default profile in a scrape."""
    from prometheus_client.parser import text_string_to_metric_families

    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "skilldesk_model_cost_micro_usd_total"
        and sample.labels.get("profile") == "default"
    )


async def test_a_fallback_is_priced_at_its_own_prices_from_litellms_map(
    tmp_path: Path, fake_llm: FakeLLM, backup_llm: FakeLLM
) -> None:
    from langchain_core.messages import HumanMessage

    from agents.models import ModelGateway, load_models_config
    from agents.models.cost import price_map

    fake_llm.script(Reply(status=500))
    backup_llm.script(Reply(content="From backup.", usage=usage(1000, 100)))
    config = load_models_config(models_file=priced_profiles(tmp_path, fake_llm, backup_llm))
    gateway = ModelGateway(config)
    try:
        reply = await gateway.chat_model().ainvoke([HumanMessage("hi")])
    finally:
        await gateway.aclose()
    per_token_in, per_token_out = price_map()["gpt-4o-mini"]  # the map litellm ships
    expected = round(1000 * per_token_in * 1e6 + 100 * per_token_out * 1e6)
    assert reply.response_metadata["cost_micro_usd"] == expected > 0
    assert gateway.usage.totals()["default"]["cost_micro_usd"] == expected


def test_a_model_with_no_known_prices_has_no_cost_rather_than_a_cost_of_nothing(
    model_settings: Any, fake_llm: FakeLLM
) -> None:
    fake_llm.script(Reply(content="Hi."))
    with TestClient(create_app(model_settings)) as client:
        run = events_of(client.post("/v1/threads/c-2/runs/stream", json={"message": "hi"}).text)
    assert "cost_micro_usd" not in run[-1][1]["usage"]


def test_the_assistant_calls_its_own_profile_unless_the_run_names_one(
    make_settings: Any, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    models = tmp_path / "models.yaml"
    models.write_text(
        f"""
default: strong
profiles:
  strong: {{model: openai/strong-model, api_base: {fake_llm.base_url}}}
  cheap: {{model: openai/cheap-model, api_base: {fake_llm.base_url}}}
""",
        encoding="utf-8",
    )
    fake_llm.script(Reply(content="cheap answer"), Reply(content="strong answer"))
    settings = make_settings(models_file=models, assistant_profile="cheap")
    with TestClient(create_app(settings)) as client:
        client.post("/v1/threads/n-1/runs/stream", json={"message": "hi"})
        client.post("/v1/threads/n-1/runs/stream", json={"message": "hi", "model": "strong"})
    assert [view.model for view in fake_llm.views] == ["cheap-model", "strong-model"]
