"""Deleting a thread while something runs on it: a workflow run started on it ends cancelled
(never waiting for an approval of a thread that is gone), and `skilldesk threads delete`, a
process of its own beside the service on one SQLite file, refuses a thread the service is
answering, or whose run a stop cut off, rather than deleting it from under the run."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import openai
from fastapi.testclient import TestClient

from app.main import create_app
from tests.fakellm import FakeLLM, Reply
from tests.integration.test_server_process import Service

SKILLDESK = str(Path(sys.executable).with_name("skilldesk"))

SLOW_THEN_APPROVAL = """
name: slow-approval
description: A slow model call, then a person's approval.
nodes:
  - {id: write, kind: llm, prompt: Say hello., next: gate}
  - {id: gate, kind: approval, summary: "Send it?", next: done}
  - {id: done, kind: set, values: {sent: "yes"}}
outputs: {sent: "{{ nodes.done.output.sent }}"}
"""


def _asked(fake_llm: FakeLLM, times: int = 1) -> None:
    deadline = time.monotonic() + 30
    while len(fake_llm.requests) < times:
        assert time.monotonic() < deadline, "the model was never asked"
        time.sleep(0.02)


def test_deleting_a_thread_cancels_the_workflow_run_under_way_on_it(
    thread_settings: Any, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    workflows = tmp_path / "workflows"
    workflows.mkdir()
    (workflows / "slow-approval.yaml").write_text(SLOW_THEN_APPROVAL, encoding="utf-8")
    settings = thread_settings.model_copy(update={"workflows_dir": workflows})
    fake_llm.script(Reply(content="Hello.", delay=1.5))
    body = {"inputs": {}, "thread_id": "wf-doomed"}
    with TestClient(create_app(settings)) as client, ThreadPoolExecutor(1) as pool:
        starting = pool.submit(client.post, "/v1/workflows/slow-approval/runs", json=body)
        _asked(fake_llm)  # the run is in its slow first node
        assert client.delete("/v1/threads/wf-doomed").status_code == 204
        run = starting.result(timeout=30).json()

        assert run["status"] == "CANCELLED", run
        assert run["error"] == "its thread was deleted"
        assert "gate" not in run["nodes"]  # it stopped before its approval
        stored = client.get(f"/v1/workflow-runs/{run['id']}").json()
        assert stored["status"] == "CANCELLED"
        on_thread = client.get("/v1/approvals", params={"thread_id": "wf-doomed"}).json()
        assert on_thread["approvals"] == []
        assert client.get("/v1/approvals").json()["approvals"] == []
        assert client.get("/v1/threads/wf-doomed").status_code == 404


# `skilldesk threads delete` beside a running service, on the same SQLite data folder.


def _cli(service: Service, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in service.env.items() if not k.startswith("SKILLDESK_")}
    env.update(
        SKILLDESK_DATA_DIR=str(service.data_dir),
        SKILLDESK_SKILLS_DIR=service.env["SKILLDESK_SKILLS_DIR"],
        SKILLDESK_MODEL="openai/fake-model",
        SKILLDESK_MODEL_API_BASE=service.env["SKILLDESK_MODEL_API_BASE"],
        SKILLDESK_MODEL_API_KEY="sk-test",
    )
    return subprocess.run(
        [SKILLDESK, "threads", *args], env=env, capture_output=True, text=True, timeout=120
    )


def _ask(service: Service, thread_id: str) -> Any:
    return service.client(thread_id).chat.completions.create(
        model="skilldesk", messages=[{"role": "user", "content": "What is my order status?"}]
    )


def _wait_running(service: Service, thread_id: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = httpx.get(f"{service.url}/v1/threads/{thread_id}", timeout=5)
        if found.status_code == 200 and found.json().get("status") == "running":
            return
        time.sleep(0.05)
    raise AssertionError(f"thread {thread_id} never ran")


def test_the_cli_refuses_to_delete_a_thread_the_service_is_answering(
    service_env: dict[str, str], fake_llm: FakeLLM, tmp_path: Path
) -> None:
    fake_llm.script(Reply(content="It ships today.", delay=4))
    service = Service(service_env, tmp_path / "data")
    try:
        with ThreadPoolExecutor(1) as pool:
            answering = pool.submit(_ask, service, "busy-one")
            _wait_running(service, "busy-one")
            refused = _cli(service, "delete", "-y", "busy-one")
            forced = _cli(service, "delete", "-y", "--force", "busy-one")
            answer = answering.result(timeout=60)

        assert refused.returncode == 1, refused.stdout
        assert "deleted" not in refused.stdout
        assert "is answering a message" in refused.stderr
        assert forced.returncode == 1, forced.stdout  # a live run is never deleted under it
        assert answer.choices[0].message.content == "It ships today."
        thread = httpx.get(f"{service.url}/v1/threads/busy-one", timeout=5).json()
        assert thread["status"] == "idle"
        assert [m["content"] for m in thread["messages"]] == [
            "What is my order status?",
            "It ships today.",
        ]

        done = _cli(service, "delete", "-y", "busy-one")  # answered: nothing holds it now
        assert done.returncode == 0, done.stderr
        assert "deleted busy-one" in done.stdout
        assert httpx.get(f"{service.url}/v1/threads/busy-one", timeout=5).status_code == 404
    finally:
        if service.proc.poll() is None:
            service.stop()


def test_the_cli_deletes_a_thread_whose_run_was_cut_off_only_when_forced(
    service_env: dict[str, str], fake_llm: FakeLLM, tmp_path: Path
) -> None:
    fake_llm.script(Reply(content="Never heard.", delay=6))
    service = Service(service_env, tmp_path / "data")
    with ThreadPoolExecutor(1) as pool:
        answering = pool.submit(_ask, service, "cut-off")
        _wait_running(service, "cut-off")
        _asked(fake_llm)
        service.proc.kill()  # its record still says running; no process runs it
        service.proc.wait(timeout=30)
        service._log.close()
        with contextlib.suppress(openai.APIError):  # its connection went with the service
            answering.result(timeout=30)

    refused = _cli(service, "delete", "-y", "cut-off")
    assert refused.returncode == 1, refused.stdout
    assert "cut off" in refused.stderr
    assert "--force" in refused.stderr
    forced = _cli(service, "delete", "-y", "--force", "cut-off")
    assert forced.returncode == 0, forced.stderr
    assert "deleted cut-off" in forced.stdout
    assert "There is no thread 'cut-off'" in _cli(service, "show", "cut-off").stderr
