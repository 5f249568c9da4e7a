"""Learned examples over HTTP and the command line: a run the model routed teaches the
router; feedback on the run confirms or removes what it taught; operators list and delete."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from tests.fakellm import FakeLLM
from tests.integration.conversation.kit import (
    PUMP,
    PUMP_AGAIN,
    make_skills,
    order_lookup,
)
from tests.integration.test_skills_cli import SKILLDESK

EXAMPLES = "/v1/skills/order-lookup/examples"


@pytest.fixture
def settings(model_settings: Any, tmp_path: Path) -> Any:
    return model_settings.model_copy(
        update={"skills_dir": make_skills(tmp_path / "skills"), "skills_embeddings": True}
    )


@pytest.fixture
def client(settings: Any) -> Iterator[TestClient]:
    with TestClient(create_app(settings)) as test_client:
        yield test_client


def run(client: TestClient, thread: str, text: str) -> dict[str, dict[str, Any]]:
    """One run over HTTP; its events by name (the last of each)."""
    response = client.post(f"/v1/threads/{thread}/runs/stream", json={"message": text})
    assert response.status_code == 200, response.text
    events = {}
    for block in response.text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines())
        events[lines["event"]] = json.loads(lines["data"])
    return events


def test_thumbs_down_removes_what_the_run_taught(client: TestClient, fake_llm: FakeLLM) -> None:
    fake_llm.script(order_lookup, order_lookup)
    events = run(client, "t-1", PUMP)
    assert events["route_decided"]["kind"] == "candidates"
    run_id = events["run_finished"]["run_id"]
    [example] = client.get(EXAMPLES).json()["data"]
    assert (example["text"], example["run_id"], example["thread_id"]) == (PUMP, run_id, "t-1")
    assert example["how"] == "candidates"

    answer = client.post(
        f"/v1/threads/t-1/runs/{run_id}/feedback",
        json={"rating": "down", "comment": "that was not about an order"},
    )
    assert answer.status_code == 200, answer.text
    assert [e["id"] for e in answer.json()["examples"]] == [example["id"]]
    assert client.get(EXAMPLES).json()["data"] == []
    # The router forgot it at once: the paraphrase is a close call again.
    fake_llm.script(order_lookup, order_lookup)
    assert run(client, "t-2", PUMP_AGAIN)["route_decided"]["kind"] == "candidates"


def test_thumbs_down_after_up_answers_the_example_as_removed(
    client: TestClient, fake_llm: FakeLLM
) -> None:
    # QA: the answer to the down listed the example as "confirmed", though it was deleted.
    fake_llm.script(order_lookup, order_lookup)
    run_id = run(client, "t-1", PUMP)["run_finished"]["run_id"]
    feedback = f"/v1/threads/t-1/runs/{run_id}/feedback"
    up = client.post(feedback, json={"rating": "up", "comment": "nice"}).json()
    [confirmed] = up["examples"]
    assert (confirmed["status"], confirmed["comment"]) == ("confirmed", "nice")
    down = client.post(feedback, json={"rating": "down"})
    assert down.status_code == 200, down.text
    assert down.json()["examples"] == [{**confirmed, "status": "removed"}]
    assert client.get(EXAMPLES).json()["data"] == []
    again = client.post(feedback, json={"rating": "down"}).json()
    assert again["examples"] == []  # nothing of the run's is left to remove


def test_thumbs_up_confirms_and_an_operator_deletes(client: TestClient, fake_llm: FakeLLM) -> None:
    fake_llm.script(order_lookup, order_lookup)
    run_id = run(client, "t-1", PUMP)["run_finished"]["run_id"]
    answer = client.post(f"/v1/threads/t-1/runs/{run_id}/feedback", json={"rating": "up"})
    [confirmed] = answer.json()["examples"]
    assert confirmed["status"] == "confirmed"
    assert client.get(EXAMPLES).json()["data"] == [confirmed]
    search = client.get("/v1/skills/search", params={"q": PUMP_AGAIN}).json()
    assert search["results"][0]["name"] == "order-lookup"
    assert search["results"][0]["learned"] > 0.8

    # Feedback on another thread's run is refused and touches nothing of this one.
    client.post("/v1/threads", json={"thread_id": "t-9"})
    other = client.post(f"/v1/threads/t-9/runs/{run_id}/feedback", json={"rating": "down"})
    assert (other.status_code, other.json()["error"]["code"]) == (404, "run_not_found")
    assert client.get(EXAMPLES).json()["data"] == [confirmed]

    assert client.delete(f"{EXAMPLES}/{confirmed['id']}").status_code == 204
    assert client.get(EXAMPLES).json()["data"] == []
    missing = client.delete(f"{EXAMPLES}/{confirmed['id']}")
    assert (missing.status_code, missing.json()["error"]["code"]) == (404, "example_not_found")
    fake_llm.script(order_lookup, order_lookup)
    assert run(client, "t-2", PUMP_AGAIN)["route_decided"]["kind"] == "candidates"


def test_deleting_a_thread_deletes_what_the_router_learned_from_it(
    client: TestClient, fake_llm: FakeLLM
) -> None:
    fake_llm.script(order_lookup, order_lookup)
    run(client, "t-1", PUMP)
    assert len(client.get(EXAMPLES).json()["data"]) == 1
    assert client.delete("/v1/threads/t-1").status_code == 204
    assert client.get(EXAMPLES).json()["data"] == []
    fake_llm.script(order_lookup, order_lookup)
    assert run(client, "t-2", PUMP_AGAIN)["route_decided"]["kind"] == "candidates"


def test_feedback_on_an_unknown_thread_or_skill_is_a_404(client: TestClient) -> None:
    answer = client.post("/v1/threads/nope/runs/r-1/feedback", json={"rating": "up"})
    assert answer.status_code == 404
    client.post("/v1/threads", json={"thread_id": "t-3"})
    for run_id in ("r-1", "00000000-0000-0000-0000-000000000000"):  # no such run: not kept
        answer = client.post(f"/v1/threads/t-3/runs/{run_id}/feedback", json={"rating": "down"})
        assert (answer.status_code, answer.json()["error"]["code"]) == (404, "run_not_found")
    assert client.get("/v1/skills/order-lokup/examples").status_code == 404
    bad = client.post("/v1/threads/nope/runs/r-1/feedback", json={"rating": "meh"})
    assert bad.status_code == 400


def test_the_command_line_lists_and_deletes_learned_examples(
    settings: Any, fake_llm: FakeLLM
) -> None:
    with TestClient(create_app(settings)) as client:
        fake_llm.script(order_lookup, order_lookup)
        run(client, "t-1", PUMP)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKILLDESK_")}
    env.update(
        SKILLDESK_DATA_DIR=str(settings.data_dir), SKILLDESK_SKILLS_DIR=str(settings.skills_dir)
    )

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        command = [SKILLDESK, "skills", "examples", "order-lookup", *args]
        return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)

    listed = cli("--json")
    assert listed.returncode == 0, listed.stderr
    [example] = json.loads(listed.stdout)["examples"]
    assert (example["text"], example["thread_id"]) == (PUMP, "t-1")
    assert PUMP in cli().stdout
    deleted = cli("--delete", example["id"], "--json")
    assert deleted.returncode == 0, deleted.stderr
    assert json.loads(deleted.stdout)["examples"] == []
    again = cli("--delete", example["id"])
    assert again.returncode == 1
    assert "has no learned example" in again.stderr
