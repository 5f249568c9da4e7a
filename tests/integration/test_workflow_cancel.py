"""A workflow run under way is cancelled over HTTP, wherever it runs: in the process asked
(its tool call under way cut off, the side effect made once), in another process sharing the
store (its model call there cut off); its thread is told; a run that has ended is a 409. A
keyed start sent again while its first run was left under way follows that run to its end."""

from __future__ import annotations

import contextlib
import json
import shutil
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from tests.fakellm import FakeLLM, Reply
from tests.integration.test_two_processes import (  # noqa: F401  (a fixture)
    PairStarter,
    start_pair,
    workflow_run,
)
from tests.servekit import serving

ROOT = Path(__file__).parents[2]
LEDGER = ROOT / "tests" / "fixtures" / "skills" / "containment" / "ledger"
CLAIM = """\
name: claim
description: File a claim for an item, then note it.
inputs:
  item: {type: string, pattern: 'for the (\\w+)'}
nodes:
  - {id: file, kind: tool, tool: file_claim, arguments: {item: "{{ inputs.item }}"}}
  - {id: noted, kind: set, values: {claim: "{{ nodes.file.output.claim }}"}}
outputs:
  message: "Filed {{ nodes.noted.output.claim }}."
"""

FILING = """\
name: filing
description: Files a claim through the claim workflow, then notes it.
inputs:
  item: {type: string}
nodes:
  - {id: sub, kind: workflow, workflow: claim, inputs: {item: "{{ inputs.item }}"}}
  - {id: done, kind: set, values: {note: "{{ nodes.sub.output.message }}"}}
outputs:
  message: "{{ nodes.done.output.note }}"
"""


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def wait_for(condition: Callable[[], Any], seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.05)


@contextlib.contextmanager
def holding(ledger: Path) -> Iterator[Path]:
    """The ledger's tool calls, once they filed their claim, held until the hold file is
    deleted: by the test, else at the end of the block (a test that failed leaves no call
    held for its service's stop to wait on)."""
    ledger.mkdir(parents=True, exist_ok=True)
    hold = ledger / "hold"
    hold.touch()
    try:
        yield hold
    finally:
        hold.unlink(missing_ok=True)


@pytest.fixture
def claims(model_settings: Any, tmp_path: Path) -> Any:
    """Settings serving the ``claim`` workflow over the side-effecting ``ledger`` skill."""
    shutil.copytree(LEDGER, tmp_path / "skills" / "ledger")
    (tmp_path / "workflows").mkdir()
    (tmp_path / "workflows" / "claim.yaml").write_text(CLAIM, encoding="utf-8")
    return model_settings.model_copy(
        update={"skills_dir": tmp_path / "skills", "workflows_dir": tmp_path / "workflows"}
    )


def test_a_run_cancelled_in_its_tool_call_ends_at_once_and_makes_its_side_effect_once(
    claims: Any,
) -> None:
    # QA: a run under way could not be cancelled (409 `run_not_waiting`): only a run waiting
    # for an approval could.
    ledger = claims.data_dir / "skills" / "ledger"
    body = {"inputs": {"item": "pump"}, "thread_id": "claims-1"}
    with (
        serving(claims) as url,
        httpx.Client(base_url=url, timeout=60) as http,
        ThreadPoolExecutor(1) as pool,
        holding(ledger) as hold,  # filed, then its tool call lasts until let go
    ):
        starting = pool.submit(http.post, "/v1/workflows/claim/runs", json=body)
        wait_for(lambda: lines(ledger / "ledger.jsonl"))  # in its tool call
        (running,) = http.get("/v1/workflow-runs", params={"status": "RUNNING"}).json()["runs"]
        # Answered while the tool call is held: it was cut off, not waited for (a cancel
        # that waits answers RUNNING, `cancel_requested`, at the end of its wait).
        cancelled = http.post(f"/v1/workflow-runs/{running['id']}/cancel")
        started = starting.result()
        assert cancelled.status_code == 200, cancelled.text
        record = cancelled.json()
        assert record["status"] == "CANCELLED"
        assert record["cancel_requested"] is False  # answered: none left asked
        assert record["error"].startswith("cancelled by ")
        assert record["ended"] is not None
        assert record["nodes"]["file"]["status"] == "cancelled"
        assert "noted" not in record["nodes"]  # no node after it ran
        assert started.json() == record  # the starter's answer is the same record
        thread = http.get("/v1/threads/claims-1").json()
        told = thread["messages"][-1]["content"]
        assert "claim" in told
        assert record["error"] in told
        assert "waited for approval" not in told
        assert "was cancelled while it ran" in told
        assert len(lines(ledger / "runs.jsonl")) == 1  # still held
        # Let go: the call under way runs to its end (the service's stop waits for it).
        hold.unlink()
    with serving(claims) as url, httpx.Client(base_url=url, timeout=60) as http:
        stored = http.get(f"/v1/workflow-runs/{running['id']}").json()
        again = http.post(f"/v1/workflow-runs/{running['id']}/cancel")
    assert stored == record  # nothing changed it since, nor resumed it
    assert len(lines(ledger / "runs.jsonl")) == 1  # the handler ran once
    assert len(lines(ledger / "ledger.jsonl")) == 1  # one claim filed
    assert again.status_code == 409, again.text
    error = again.json()["error"]
    assert error["code"] == "run_ended"
    assert f"workflow run {running['id']} is CANCELLED" in error["message"]


def test_a_sub_workflow_run_is_cancelled_through_the_run_it_is_a_step_of(claims: Any) -> None:
    # QA: cancelling a sub-workflow's run on its own failed the run it was a step of.
    (claims.workflows_dir / "filing.yaml").write_text(FILING, encoding="utf-8")
    ledger = claims.data_dir / "skills" / "ledger"
    body = {"inputs": {"item": "pump"}, "thread_id": "claims-2"}
    with (
        serving(claims) as url,
        httpx.Client(base_url=url, timeout=60) as http,
        ThreadPoolExecutor(1) as pool,
        holding(ledger) as hold,  # the child's tool call lasts until let go
    ):
        starting = pool.submit(http.post, "/v1/workflows/filing/runs", json=body)
        wait_for(lambda: lines(ledger / "ledger.jsonl"))  # the child in its tool call
        running = http.get("/v1/workflow-runs", params={"status": "RUNNING"}).json()["runs"]
        runs = {r["workflow"]: r["id"] for r in running}
        refused = http.post(f"/v1/workflow-runs/{runs['claim']}/cancel")
        child = http.get(f"/v1/workflow-runs/{runs['claim']}").json()
        cancelled = http.post(f"/v1/workflow-runs/{runs['filing']}/cancel")
        started = starting.result()
        hold.unlink()
        wait_for(
            lambda: http.get(f"/v1/workflow-runs/{runs['claim']}").json()["status"] != "RUNNING"
        )
        stopped = http.get(f"/v1/workflow-runs/{runs['claim']}").json()
        again = http.post(f"/v1/workflow-runs/{runs['claim']}/cancel")
    assert refused.status_code == 409, refused.text
    error = refused.json()["error"]
    assert error["code"] == "run_is_step"
    assert f"is a step of workflow run {runs['filing']}" in error["message"]
    assert f"cancel run {runs['filing']} instead" in error["message"]
    assert child["status"] == "RUNNING"  # nothing was changed
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["status"] == "CANCELLED"
    assert started.json()["status"] == "CANCELLED"
    assert (stopped["status"], stopped["error"]) == ("CANCELLED", cancelled.json()["error"])
    # Each shows the node it was cut off in (QA: the child's showed `nodes: {}`).
    assert {n: v["status"] for n, v in stopped["nodes"].items()} == {"file": "cancelled"}
    assert {n: v["status"] for n, v in cancelled.json()["nodes"].items()} == {"sub": "cancelled"}
    assert not stopped["cancel_requested"]
    # Its parent ended, the step's own cancel is answered as any ended run's.
    assert again.json()["error"]["code"] == "run_ended"


def test_a_run_a_chat_turn_drives_is_cancelled_and_the_turn_answers_so_once(
    claims: Any,
) -> None:
    ledger = claims.data_dir / "skills" / "ledger"
    chat = {"workflow": "claim", "messages": [{"role": "user", "content": "a claim for the pump"}]}
    with (
        serving(claims) as url,
        httpx.Client(base_url=url, timeout=60) as http,
        ThreadPoolExecutor(1) as pool,
        holding(ledger),  # its tool call lasts until let go
    ):
        asking = pool.submit(
            http.post, "/v1/chat/completions", json=chat, headers={"X-Thread-Id": "chat-1"}
        )
        wait_for(lambda: lines(ledger / "ledger.jsonl"))
        (running,) = http.get("/v1/workflow-runs", params={"status": "RUNNING"}).json()["runs"]
        cancelled = http.post(f"/v1/workflow-runs/{running['id']}/cancel").json()
        answer = asking.result().json()["choices"][0]["message"]["content"]
        thread = http.get("/v1/threads/chat-1").json()
    assert cancelled["status"] == "CANCELLED", cancelled
    assert cancelled["error"] in answer
    assert "waited for approval" not in answer
    # The turn's answer is the thread's one word of it: no second message from the cancel.
    assert [m["content"] for m in thread["messages"][1:]] == [answer]


def test_a_run_that_succeeded_is_not_cancelled_and_the_answer_names_its_status(
    claims: Any,
) -> None:
    with TestClient(create_app(claims)) as client:
        record = client.post("/v1/workflows/claim/runs", json={"inputs": {"item": "valve"}})
        assert record.json()["status"] == "SUCCEEDED", record.text
        refused = client.post(f"/v1/workflow-runs/{record.json()['id']}/cancel")
        assert refused.status_code == 409, refused.text
        assert refused.json()["error"]["code"] == "run_ended"
        assert "is SUCCEEDED: it has ended" in refused.json()["error"]["message"]
        stored = client.get(f"/v1/workflow-runs/{record.json()['id']}").json()
    assert stored == record.json()  # nothing changed


def test_a_keyed_start_sent_again_while_its_run_was_left_running_follows_it_to_its_end(
    claims: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # QA (review): the stream of the start sent again ended with `workflow_ended` carrying
    # status RUNNING, though `workflow_ended` says the run is over.
    url, key = "/v1/workflows/claim/runs", {"Idempotency-Key": "claim-7"}
    body = {"inputs": {"item": "pump"}, "stream": True}
    with TestClient(create_app(claims)) as client:
        engine = client.app.state.services.engine  # type: ignore[attr-defined]
        put = engine.documents.put

        async def failing(kind: str, doc_id: str, doc: dict[str, Any], **kw: Any) -> None:
            if kw.get("status") not in (None, "RUNNING"):  # its end is never stored
                raise TimeoutError("the store did not answer")
            await put(kind, doc_id, doc, **kw)

        monkeypatch.setattr(engine.documents, "put", failing)
        first = client.post(url, json=body, headers=key)
        monkeypatch.undo()
        run_id = first.headers["X-Run-Id"]
        assert client.get(f"/v1/workflow-runs/{run_id}").json()["status"] == "RUNNING"
        again = client.post(url, json=body, headers=key)
        assert again.status_code == 200, again.text
        assert again.headers["X-Run-Id"] == run_id
        events = [json.loads(x[6:]) for x in again.text.splitlines() if x.startswith("data: ")]
        kinds = [e["type"] for e in events]
        assert kinds[-1] == "workflow_ended", kinds
        assert events[-1]["replayed"] is True
        assert events[-1]["record"]["status"] == "SUCCEEDED"
        assert events[-1]["record"]["id"] == run_id
        assert events[-1]["record"]["outputs"]["message"].startswith("Filed CLM-")
        # Gone on from its last step (its last save had failed): no node ran again.
        assert "node_started" not in kinds
        assert client.get(f"/v1/workflow-runs/{run_id}").json()["status"] == "SUCCEEDED"
        plain = client.post(url, json={**body, "stream": False}, headers=key).json()
    assert plain == events[-1]["record"]
    ledger = claims.data_dir / "skills" / "ledger"
    assert len(lines(ledger / "ledger.jsonl")) == 1  # one claim, the first run's


def test_a_run_its_process_left_running_shows_its_nodes_and_is_cancelled_at_once(
    claims: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Its record is stored only at a wait or the end: it showed no node while it ran.
    with TestClient(create_app(claims)) as client:
        engine = client.app.state.services.engine  # type: ignore[attr-defined]
        put = engine.documents.put

        async def failing(kind: str, doc_id: str, doc: dict[str, Any], **kw: Any) -> None:
            if kw.get("status") not in (None, "RUNNING"):  # its end is never stored
                raise TimeoutError("the store did not answer")
            await put(kind, doc_id, doc, **kw)

        monkeypatch.setattr(engine.documents, "put", failing)
        body = {"inputs": {"item": "pump"}, "thread_id": "claims-2", "stream": True}
        run_id = client.post("/v1/workflows/claim/runs", json=body).headers["X-Run-Id"]
        monkeypatch.undo()
        seen = client.get(f"/v1/workflow-runs/{run_id}").json()
        cancelled = client.post(f"/v1/workflow-runs/{run_id}/cancel")
        resumed = client.portal.call(engine.resume_orphans)  # type: ignore[union-attr]
        thread = client.get("/v1/threads/claims-2").json()
    assert seen["status"] == "RUNNING"
    assert {n: v["status"] for n, v in seen["nodes"].items()} == {"file": "done", "noted": "done"}
    assert seen["nodes"]["file"]["output"]["repeat"] is False
    assert cancelled.status_code == 200, cancelled.text
    record = cancelled.json()
    assert record["status"] == "CANCELLED"
    assert record["nodes"] == seen["nodes"]
    assert resumed == []  # cancelled: never resumed
    assert record["error"] in thread["messages"][-1]["content"]
    ledger = claims.data_dir / "skills" / "ledger"
    assert len(lines(ledger / "runs.jsonl")) == 1


def test_a_run_under_way_in_another_process_shows_its_nodes_and_is_cancelled_from_this_one(
    start_pair: PairStarter,  # noqa: F811
    fake_llm: FakeLLM,
) -> None:
    a, b = start_pair(run_lease_s="3")
    fake_llm.script(Reply(content="Too late.", delay=20))
    body = {"inputs": {"order_id": "ORD1002"}, "thread_id": "overview-1"}
    with ThreadPoolExecutor(1) as pool:
        starting = pool.submit(
            httpx.post, f"{a.url}/v1/workflows/order-overview/runs", json=body, timeout=60
        )
        run_id = workflow_run(b, "RUNNING")["id"]
        wait_for(lambda: fake_llm.requests)  # A waits for the expert's answer
        seen = httpx.get(f"{b.url}/v1/workflow-runs/{run_id}").json()
        asked = time.monotonic()
        cancelled = httpx.post(f"{b.url}/v1/workflow-runs/{run_id}/cancel", timeout=60)
        took = time.monotonic() - asked
        started = starting.result()
    # B shows the nodes A finished so far (its record is stored only at a wait or the end).
    assert seen["status"] == "RUNNING"
    assert seen["nodes"]["order"]["status"] == "done"
    assert seen["nodes"]["order"]["output"]["order_id"] == "ORD1002"
    assert cancelled.status_code == 200, cancelled.text
    record = cancelled.json()
    assert record["status"] == "CANCELLED", record
    assert record["error"].startswith("cancelled by ")
    assert took < 3  # the model's answer was 20 s away: A cut the call off
    assert record["nodes"]["returns"]["status"] == "cancelled"
    assert "summary" not in record["nodes"]
    assert started.status_code == 200, started.text
    assert started.json()["status"] == "CANCELLED"
    assert len(fake_llm.requests) == 1  # nobody asked the model again
    thread = httpx.get(f"{a.url}/v1/threads/overview-1").json()
    assert record["error"] in thread["messages"][-1]["content"]
    assert httpx.get(f"{a.url}/v1/workflow-runs/{run_id}").json()["status"] == "CANCELLED"
