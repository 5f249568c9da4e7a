"""A thread lists the approvals its workflow runs wait for (`waiting_approvals`), to whoever
may read it: a chat-only user, whom the inbox refuses, sees what waits on their thread."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from pydantic import SecretStr

from app.main import create_app

NOTE = """
name: send-note
description: A person approves a note before it goes.
inputs: {note: {type: string}}
nodes:
  - {id: gate, kind: approval, summary: "Send the note {{ inputs.note }}?", next: done}
  - {id: done, kind: set, values: {sent: "yes"}}
outputs: {sent: "{{ nodes.done.output.sent }}"}
"""
ALICE = "sdk_alice-key-0123456789abcdef"  # chat only
ANN = "sdk_ann-key-0123456789abcdef00"  # approves


def _settings(thread_settings: Any, tmp_path: Path, **update: Any) -> Any:
    workflows = tmp_path / "workflows"
    workflows.mkdir()
    (workflows / "send-note.yaml").write_text(NOTE, encoding="utf-8")
    return thread_settings.model_copy(update={"workflows_dir": workflows, **update})


def test_a_waiting_runs_approval_is_listed_on_its_thread_until_it_is_decided(
    thread_settings: Any, tmp_path: Path
) -> None:
    with TestClient(create_app(_settings(thread_settings, tmp_path))) as client:
        body = {"inputs": {"note": "hello"}, "thread_id": "wf-note"}
        run = client.post("/v1/workflows/send-note/runs", json=body).json()
        assert run["status"] == "WAITING", run
        other = {"inputs": {"note": "elsewhere"}, "thread_id": "wf-other"}
        assert client.post("/v1/workflows/send-note/runs", json=other).status_code == 200

        thread = client.get("/v1/threads/wf-note").json()
        [waiting] = thread["waiting_approvals"]  # not the other thread's
        inbox = client.get("/v1/approvals", params={"thread_id": "wf-note"}).json()
        assert [waiting] == inbox["approvals"]  # the inbox's shape: one card for both
        assert waiting["approval_id"] == run["waiting"]["approval_id"]
        assert (waiting["run_id"], waiting["workflow"]) == (run["id"], "send-note")
        assert waiting["summary"] == "Send the note hello?"
        assert waiting["thread_id"] == "wf-note"
        assert waiting["asked"] >= run["started"]

        decided = client.post(
            f"/v1/approvals/{waiting['approval_id']}", json={"decision": "approve"}
        )
        assert decided.json()["status"] == "SUCCEEDED", decided.text
        assert client.get("/v1/threads/wf-note").json()["waiting_approvals"] == []


def test_a_chat_only_user_sees_what_waits_on_their_thread_and_not_on_anothers(
    thread_settings: Any, tmp_path: Path
) -> None:
    keys = SecretStr(f"alice:chat:{ALICE} ann:chat,approve:{ANN}")
    settings = _settings(thread_settings, tmp_path, api_keys=keys)
    alice = {"Authorization": f"Bearer {ALICE}"}
    ann = {"Authorization": f"Bearer {ANN}"}
    with TestClient(create_app(settings)) as client:
        body = {"inputs": {"note": "from alice"}, "thread_id": "wf-alice"}
        run = client.post("/v1/workflows/send-note/runs", json=body, headers=alice).json()
        assert run["status"] == "WAITING", run
        assert client.get("/v1/approvals", headers=alice).status_code == 403

        thread = client.get("/v1/threads/wf-alice", headers=alice).json()
        assert [a["run_id"] for a in thread["waiting_approvals"]] == [run["id"]]
        # Alice's thread is not Ann's to read, nor what waits on it.
        assert client.get("/v1/threads/wf-alice", headers=ann).status_code == 404
