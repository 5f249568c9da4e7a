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
