"""A side effect happens once, crash or not: the service is killed (-9) during and after a
side-effecting call, restarted on the same data, and the client resends its message."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sqlite3
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fakellm import FakeLLM, Reply, ToolCall
from tests.integration.test_server_process import Service

FIXTURES = Path(__file__).parents[1] / "fixtures" / "skills" / "containment"
MESSAGE = {"role": "user", "content": "file a claim for the pump"}


@pytest.fixture
def env(fake_llm: FakeLLM, tmp_path: Path) -> dict[str, str]:
    shutil.copytree(FIXTURES / "ledger", tmp_path / "skills" / "ledger")
    values = {k: v for k, v in os.environ.items() if not k.startswith("SKILLDESK_")}
    values.update(
        SKILLDESK_SKILLS_DIR=str(tmp_path / "skills"),
        SKILLDESK_SKILLS_EMBEDDINGS="false",
        SKILLDESK_MODEL="openai/fake-model",
        SKILLDESK_MODEL_API_BASE=fake_llm.base_url,
        SKILLDESK_MODEL_API_KEY="sk-test",
        SKILLDESK_LOG_FORMAT="json",
    )
    return values


def ask(service: Service, timeout: float = 60) -> httpx.Response:
    return httpx.post(
        f"{service.url}/v1/chat/completions",
        json={"model": "skilldesk", "skill": "ledger", "messages": [MESSAGE]},
        headers={"X-Thread-Id": "claims-1"},
        timeout=timeout,
    )


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def wait_for(condition: Any, seconds: float = 20) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.05)


def kill(service: Service) -> None:
    service.proc.kill()
    service.proc.wait(timeout=10)


def journal(data: Path) -> list[tuple[Any, ...]]:
    with sqlite3.connect(data / "skilldesk.sqlite") as conn:
        return conn.execute("SELECT key, status, tool FROM skilldesk_calls").fetchall()


def test_killed_during_a_side_effect_the_resent_message_reuses_its_key(
    env: dict[str, str], fake_llm: FakeLLM, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    skill_data = data / "skills" / "ledger"
    skill_data.mkdir(parents=True)
    (skill_data / "pause").write_text("30")
    fake_llm.script(Reply(tool_calls=[ToolCall("file_claim", {"item": "pump"}, id="call_a")]))
    first = Service(env, data)
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(ask, first)
        wait_for(lambda: len(lines(skill_data / "ledger.jsonl")) == 1)  # filed, then paused
        kill(first)
        with pytest.raises(httpx.HTTPError):
            pending.result()
    (skill_data / "pause").unlink()
    # The reply that asked for the call was recorded before the call ran, and is kept while
    # the turn is unanswered.
    assert sorted((row[1], row[2]) for row in journal(data)) == [
        ("done", "(model reply)"),
        ("started", "file_claim"),
    ]

    # The reply that asked for the call was recorded before the call ran: the run answering
    # the resent message acts on it again instead of asking the model for a new one.
    fake_llm.script(Reply(content="Your claim is filed."))
    second = Service(env, data)
    try:
        response = ask(second)
    finally:
        second.stop()
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["message"]["content"] == "Your claim is filed."
    runs = lines(skill_data / "runs.jsonl")
    assert len(runs) == 2  # cut off once, so it ran again...
    assert runs[0]["key"] == runs[1]["key"]  # ...with the same key...
    assert len(lines(skill_data / "ledger.jsonl")) == 1  # ...and filed one claim
    # The turn answered, its recorded reply is deleted; the call's record stays.
    assert [(row[1], row[2]) for row in journal(data)] == [("done", "file_claim")]
    assert runs[0]["key"] in [row[0] for row in journal(data)]


def test_killed_after_a_side_effect_the_resent_message_does_not_run_it_again(
    env: dict[str, str], fake_llm: FakeLLM, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    skill_data = data / "skills" / "ledger"
    fake_llm.script(
        Reply(tool_calls=[ToolCall("file_claim", {"item": "pump"}, id="call_a")]),
        Reply(content="never sent", delay=30),  # the answer is slow: the kill comes first
    )
    first = Service(env, data)
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(ask, first)
        wait_for(lambda: fake_llm.remaining == 0)  # the handler ran; the answer is awaited
        kill(first)
        with pytest.raises(httpx.HTTPError):
            pending.result()

    fake_llm.script(Reply(content="Your claim is filed."))
    second = Service(env, data)
    try:
        response = ask(second)
    finally:
        second.stop()
    assert response.status_code == 200, response.text
    assert len(lines(skill_data / "runs.jsonl")) == 1  # the recorded result was reused
    assert len(lines(skill_data / "ledger.jsonl")) == 1
    tool_result = fake_llm.requests[-1]["messages"][-1]
    assert tool_result["role"] == "tool"
    assert '"repeat": false' in tool_result["content"]  # the first run's own result


def test_a_model_that_words_the_call_differently_after_a_crash_does_not_repeat_it(
    env: dict[str, str], fake_llm: FakeLLM, tmp_path: Path
) -> None:
    # Found by QA: the resumed run asked the model again, which wrote other arguments (as a
    # real model words a title or a description anew); other arguments, another key, and the
    # side effect ran twice.
    data = tmp_path / "data"
    skill_data = data / "skills" / "ledger"
    fake_llm.script(
        Reply(tool_calls=[ToolCall("file_claim", {"item": "pump P-7"}, id="call_a")]),
        Reply(content="never sent", delay=30),
    )
    first = Service(env, data)
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(ask, first)
        wait_for(lambda: fake_llm.remaining == 0)
        kill(first)
        with pytest.raises(httpx.HTTPError):
            pending.result()
    asked = len(fake_llm.requests)

    # Asked again for its first reply, the model would word the call anew (or, as scripted
    # here, answer without it): it must not be asked; it is asked only for the answer.
    fake_llm.script(Reply(content="Your claim is filed."))
    second = Service(env, data)
    try:
        response = ask(second)
        history = httpx.get(f"{second.url}/v1/threads/claims-1", timeout=30).json()
    finally:
        second.stop()
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["message"]["content"] == "Your claim is filed."
    assert len(fake_llm.requests) == asked + 1
    assert fake_llm.requests[-1]["messages"][-1]["role"] == "tool"  # after the recorded call
    assert '"repeat": false' in fake_llm.requests[-1]["messages"][-1]["content"]
    assert [r["item"] for r in lines(skill_data / "ledger.jsonl")] == ["pump P-7"]
    assert len(lines(skill_data / "runs.jsonl")) == 1
    calls = [c for m in history["messages"] for c in m.get("tool_calls") or []]
    assert [(c["name"], c["arguments"], c["id"]) for c in calls] == [
        ("file_claim", {"item": "pump P-7"}, "call_a")
    ]


def test_a_side_effect_under_way_at_a_stop_is_recorded_before_the_store_closes(
    env: dict[str, str], fake_llm: FakeLLM, tmp_path: Path
) -> None:
    # Told to stop with no grace, the process cuts the run off, but the call under way
    # finishes (a side effect half made is worse): its end must reach the journal before the
    # store closes, or the next start takes the call for one cut off and makes it again.
    data = tmp_path / "data"
    skill_data = data / "skills" / "ledger"
    skill_data.mkdir(parents=True)
    (skill_data / "pause").write_text("5")
    fake_llm.script(Reply(tool_calls=[ToolCall("file_claim", {"item": "pump"}, id="call_a")]))
    first = Service({**env, "SKILLDESK_SHUTDOWN_GRACE_S": "0"}, data)
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(ask, first)
        wait_for(lambda: len(lines(skill_data / "ledger.jsonl")) == 1)  # filed, then paused
        first.stop()  # SIGTERM while the handler pauses
        with contextlib.suppress(httpx.HTTPError):
            pending.result()
    [stopped] = [e for e in first.logs() if e.get("event") == "service.stopped"]
    assert stopped["runs_cut_off"] == 1  # the stop came while the call was under way
    assert not [e for e in first.logs() if e.get("event") == "tool.journal_write_lost"]
    assert ("done", "file_claim") in [(row[1], row[2]) for row in journal(data)]

    (skill_data / "pause").unlink()
    fake_llm.script(Reply(content="Your claim is filed."))
    second = Service(env, data)
    try:
        response = ask(second)
    finally:
        second.stop()
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["message"]["content"] == "Your claim is filed."
    assert len(lines(skill_data / "runs.jsonl")) == 1  # its recorded result was reused
    assert len(lines(skill_data / "ledger.jsonl")) == 1
