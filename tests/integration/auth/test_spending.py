"""A user's daily spending: what their runs cost adds up per user and UTC day (shown by
/v1/me), and past SKILLDESK_DAILY_SPEND_LIMIT_USD their new runs are refused with a 429 that
says when the budget renews; another user is not affected."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from app.main import create_app
from tests.fakellm import FakeLLM, Reply
from tests.integration.auth.conftest import bearer
from tests.integration.test_reasoning_and_cost import priced_profiles, usage


def priced(settings: Any, tmp_path: Path, fake_llm: FakeLLM, limit_usd: float) -> Any:
    """``settings`` with priced model profiles ($2 / $10 per million tokens) and a daily
    spending limit."""
    update = {
        "models_file": priced_profiles(tmp_path, fake_llm),
        "model": None,
        "daily_spend_limit_usd": limit_usd,
    }
    return settings.model_copy(update=update)


def spent_today(client: TestClient, who: str) -> int:
    """What ``who`` spent today, in millionths of a dollar (``/v1/me``)."""
    return int(client.get("/v1/me", headers=bearer(who)).json()["spent_today_micro_usd"])


def test_past_the_daily_limit_a_user_s_runs_are_refused_and_another_user_s_are_not(
    keyed_settings: Any, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    # $2 / $10 per million tokens: 4,000 and 3,500 millionths of a dollar; limit $0.005.
    settings = priced(keyed_settings, tmp_path, fake_llm, limit_usd=0.005)
    fake_llm.script(
        Reply(content="One.", usage=usage(1000, 200)),
        Reply(content="Two.", usage=usage(1500, 50)),
        Reply(content="Bob's.", usage=usage(1000, 200)),
    )
    with TestClient(create_app(settings)) as client:

        def run(who: str, thread: str) -> Any:
            return client.post(
                f"/v1/threads/{thread}/runs/stream", json={"message": "hi"}, headers=bearer(who)
            )

        assert run("alice", "a-1").status_code == 200  # 4,000 spent: under the limit
        assert spent_today(client, "alice") == 4000
        assert run("alice", "a-1").status_code == 200  # still under when it started
        me = client.get("/v1/me", headers=bearer("alice")).json()
        assert (me["spent_today_micro_usd"], me["daily_limit_micro_usd"]) == (7500, 5000)

        refused = run("alice", "a-2")
        assert refused.status_code == 429
        error = refused.json()["error"]
        assert error["code"] == "spending_limit_reached"
        assert "midnight UTC" in error["message"]
        assert 0 < int(refused.headers["Retry-After"]) <= 86400
        chat = client.post(
            "/v1/chat/completions",
            json={"model": "skilldesk", "messages": [{"role": "user", "content": "hi"}]},
            headers=bearer("alice"),
        )
        assert chat.status_code == 429  # every way of starting a run

        assert run("bob", "b-1").status_code == 200  # bob's budget is his own
        assert spent_today(client, "bob") == 4000


NOTE = """
name: note
description: A note the model writes.
inputs: {text: {type: string}}
nodes:
  - {id: write, kind: llm, prompt: "Write a note: {{ inputs.text }}"}
outputs: {message: "{{ nodes.write.output }}"}
"""
GATED = """
name: gated-note
description: A note the model writes once a person approves it.
inputs: {text: {type: string}}
nodes:
  - {id: ok, kind: approval, summary: "Write a note about {{ inputs.text }}?", next: write}
  - {id: write, kind: llm, prompt: "Write a note: {{ inputs.text }}"}
outputs: {message: "{{ nodes.write.output }}"}
"""


def test_workflow_runs_count_against_the_daily_limit_of_who_started_them(
    keyed_settings: Any, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    (keyed_settings.workflows_dir / "note.yaml").write_text(NOTE)
    (keyed_settings.workflows_dir / "gated-note.yaml").write_text(GATED)
    settings = priced(keyed_settings, tmp_path, fake_llm, limit_usd=0.005)
    fake_llm.script(*[Reply(content="Noted.", usage=usage(1000, 200))] * 5)  # 4,000 each
    with TestClient(create_app(settings)) as client:
        spent = partial(spent_today, client)

        def start(who: str, name: str, **extra: Any) -> Any:
            body = {"inputs": {"text": "the lift"}, **extra}
            return client.post(f"/v1/workflows/{name}/runs", json=body, headers=bearer(who))

        assert start("alice", "note").json()["status"] == "SUCCEEDED"
        assert spent("alice") == 4000
        streamed = start("alice", "note", stream=True)
        assert "workflow_ended" in streamed.text
        assert spent("alice") == 8000
        refused = start("alice", "note")
        assert refused.status_code == 429
        assert refused.json()["error"]["code"] == "spending_limit_reached"
        by_tool = client.post(
            "/v1/tools/run_workflow/invoke",
            json={"arguments": {"workflow": "note", "inputs": {"text": "x"}}},
            headers=bearer("alice"),
        ).json()
        assert by_tool["ok"] is False
        assert by_tool["error"]["code"] == "spending_limit_reached"
        assert "midnight UTC" in by_tool["error"]["message"]

        waiting = start("bob", "gated-note").json()
        assert waiting["status"] == "WAITING"
        assert spent("bob") == 0  # nothing has run on a model yet
        approval = waiting["waiting"]["approval_id"]
        decided = client.post(
            f"/v1/approvals/{approval}", json={"decision": "approve"}, headers=bearer("approver")
        )
        assert decided.json()["status"] == "SUCCEEDED", decided.text
        assert spent("bob") == 4000  # the run's starter pays for the calls after the decision
        assert spent("approver") == 0

        # Started through the tool server, at /v1/tools or over MCP: counted, and refused
        # once the day is spent.
        arguments = {"workflow": "note", "inputs": {"text": "the stairs"}}

        def by_tool(who: str) -> Any:
            body = {"arguments": arguments}
            response = client.post("/v1/tools/run_workflow/invoke", json=body, headers=bearer(who))
            assert response.status_code == 200, response.text
            return response.json()

        def by_mcp(who: str) -> str:
            call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call"}
            call["params"] = {"name": "run_workflow", "arguments": arguments}
            accept = {"Accept": "application/json, text/event-stream", "Host": "localhost:8000"}
            response = client.post("/mcp", json=call, headers={**bearer(who), **accept})
            assert response.status_code == 200, response.text
            return response.text

        assert by_tool("agent")["ok"] is True
        assert spent("agent") == 4000
        assert '"isError":false' in by_mcp("bob")
        assert spent("bob") == 8000
        assert by_tool("bob")["error"]["code"] == "spending_limit_reached"
        assert "spending_limit_reached" in by_mcp("bob")
        assert spent("bob") == 8000


TWO_NOTES = """
name: two-notes
description: Two notes the model writes, one after the other.
inputs: {text: {type: string}}
nodes:
  - {id: first, kind: llm, prompt: "Write a note: {{ inputs.text }}", next: second}
  - {id: second, kind: llm, prompt: "Write another note: {{ inputs.text }}"}
outputs: {message: "{{ nodes.second.output }}"}
"""


def test_a_forked_run_counts_its_own_calls_against_the_day_of_who_forked_it(
    keyed_settings: Any, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    (keyed_settings.workflows_dir / "two-notes.yaml").write_text(TWO_NOTES)
    settings = priced(keyed_settings, tmp_path, fake_llm, limit_usd=0.011)
    fake_llm.script(*[Reply(content="Noted.", usage=usage(1000, 200))] * 3)  # 4,000 each
    with TestClient(create_app(settings)) as client:
        spent = partial(spent_today, client)

        body = {"inputs": {"text": "the lift"}}
        run = client.post("/v1/workflows/two-notes/runs", json=body, headers=bearer("agent"))
        original = run.json()
        assert original["usage"]["cost_micro_usd"] == 8000
        assert spent("agent") == 8000

        # From the second node: the first keeps its output, and its call is the original's.
        fork = {"node": "second", "inputs": {"text": "the stairs"}}
        forked = client.post(
            f"/v1/workflow-runs/{original['id']}/fork", json=fork, headers=bearer("agent")
        )
        assert forked.status_code == 200, forked.text
        record = forked.json()
        assert record["status"] == "SUCCEEDED"
        assert record["usage"]["model_calls"] == 1
        assert record["usage"]["cost_micro_usd"] == 4000
        assert spent("agent") == 12000
        again = client.post(
            f"/v1/workflow-runs/{original['id']}/fork", json=fork, headers=bearer("agent")
        )
        assert again.status_code == 429  # past the limit: forks are refused like starts
        assert len(fake_llm.requests) == 3
