"""`skilldesk approvals ...` through its entry point: the approvals workflow runs wait for,
listed, shown and decided on the service's store; a decision runs the rest of the run, tells
its thread, and a second one is refused saying how the first went, also beside a live
service on the same store."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from agents.state.checkpointers import open_checkpointer, sqlite_url
from agents.state.documents import documents_for
from app.api.schemas.workflows import RunPublic
from app.main import create_app
from app.services import open_services
from tests.fakellm import FakeLLM, Reply
from tests.pgkit import schema_url
from tests.skillkit import tool, write_skill

SKILLDESK = str(Path(sys.executable).with_name("skilldesk"))
ROOT = Path(__file__).resolve().parents[2]
LARGE = '{"order_id": "ORD1002"}'  # 488 CNY: over the refund workflow's automatic limit
TWO_GATES = """\
name: two-gates
description: Asks twice, then has the model say so.
nodes:
  - {id: first, kind: approval, summary: "First: go on?"}
  - {id: second, kind: approval, summary: "Second: really?"}
  - {id: write, kind: llm, prompt: Say that both approvals were given.}
outputs: {message: "{{ nodes.write.output }}"}
"""
SLOW_AFTER = """\
name: slow-after
description: Asks, then does slow work.
nodes:
  - {id: ok, kind: approval, summary: Go?}
  - {id: slow, kind: tool, tool: slow_work}
outputs: {message: "{{ nodes.slow.output }}"}
"""


def skilldesk(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SKILLDESK, *args], env=env, capture_output=True, text=True, timeout=120)


def environment(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The bundled skills and workflows, the store in ``tmp_path/data``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKILLDESK_")}
    env.update(
        {
            "SKILLDESK_DATA_DIR": str(tmp_path / "data"),
            "SKILLDESK_SKILLS_DIR": str(ROOT / "skills"),
            "SKILLDESK_WORKFLOWS_DIR": str(ROOT / "workflows"),
            "SKILLDESK_SKILLS_EMBEDDINGS": "false",
            **extra,
        }
    )
    return env


def waiting_for(out: str) -> tuple[str, str]:
    """The run and the approval a `workflows run` (or a decision) says it waits for."""
    found = re.search(r"^(\w+) WAITING for approval (\S+):", out, re.MULTILINE)
    assert found is not None, out
    return found.group(1), found.group(2)


def test_a_waiting_run_is_listed_shown_and_approved_and_its_thread_told(tmp_path: Path) -> None:
    env = environment(tmp_path)
    asked_after = time.time()
    started = skilldesk(
        env, "workflows", "run", "refund-request", "--input", LARGE, "--thread", "t-refund"
    )
    assert started.returncode == 0, started.stderr
    run_id, approval = waiting_for(started.stdout)
    # QA: it said "(decide with POST /v1/approvals/ID)"; on the command line, the commands.
    assert f"`skilldesk approvals approve {approval}`" in started.stdout
    assert f"`skilldesk approvals reject {approval}`" in started.stdout
    assert "/v1/" not in started.stdout

    listed = skilldesk(env, "approvals", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    [pending] = json.loads(listed.stdout)
    assert {k: v for k, v in pending.items() if k not in ("asked", "data")} == {
        "approval_id": approval,
        "status": "pending",
        "run_id": run_id,
        "run_status": "WAITING",
        "workflow": "refund-request",
        "thread_id": "t-refund",
        "node": "approve",
        "summary": "Refund 488.0 CNY for ORD1002 (朱军)? Reason: not given",
        "decision": None,
        "error": None,
    }
    assert pending["data"]["order_id"] == "ORD1002"
    assert asked_after <= pending["asked"] <= time.time()
    text = skilldesk(env, "approvals", "list").stdout.splitlines()
    assert text[0].startswith(f"{approval}  ")
    assert text[0].endswith("  refund-request  thread t-refund")
    assert text[1] == "    Refund 488.0 CNY for ORD1002 (朱军)? Reason: not given"
    shown = skilldesk(env, "approvals", "show", approval, "--json")
    assert json.loads(shown.stdout) == pending

    approved = skilldesk(
        env, "approvals", "approve", approval, "--comment", "Parcel checked.", "--by", "alice"
    )
    assert approved.returncode == 0, approved.stderr
    assert approved.stdout.splitlines() == [
        f"approved {approval}",
        "  approve: ok",
        "  confirm: ok",
        f"{run_id} SUCCEEDED",
        "The refund of 488.0 CNY for ORD1002 is approved.",
    ]
    [record] = json.loads(skilldesk(env, "workflows", "runs", "--json").stdout)
    assert record["status"] == "SUCCEEDED"
    decision = record["nodes"]["approve"]["output"]
    assert (decision["approved"], decision["by"], decision["comment"]) == (
        True,
        "alice",
        "Parcel checked.",
    )
    thread = json.loads(skilldesk(env, "threads", "show", "t-refund", "--json").stdout)
    assert thread["active"][-1]["content"] == "The refund of 488.0 CNY for ORD1002 is approved."
    assert skilldesk(env, "approvals", "list").stdout == "no approvals waiting\n"
    assert json.loads(skilldesk(env, "approvals", "list", "--json").stdout) == []

    # Decided: refused either way, saying how, by whom and when; nothing changes.
    for again in (["approve", approval], ["reject", approval, "--comment", "No."]):
        refused = skilldesk(env, "approvals", *again)
        assert refused.returncode == 1, refused.stdout
        assert refused.stderr.startswith(
            f"skilldesk: approval {approval} was decided already: approved by alice at "
        )
        assert "(comment: 'Parcel checked.'); nothing was changed" in refused.stderr
        assert f"(its run {run_id} is SUCCEEDED)" in refused.stderr
    assert json.loads(skilldesk(env, "workflows", "runs", "--json").stdout) == [record]
    past = json.loads(skilldesk(env, "approvals", "show", approval, "--json").stdout)
    assert (past["status"], past["run_status"], past["decision"]["by"]) == (
        "approved",
        "SUCCEEDED",
        "alice",
    )
    assert "status    approved by alice at " in skilldesk(env, "approvals", "show", approval).stdout


def test_a_rejection_follows_the_reject_branch_and_unknown_approvals_are_named(
    tmp_path: Path,
) -> None:
    env = environment(tmp_path)
    run_id, approval = waiting_for(
        skilldesk(env, "workflows", "run", "refund-request", "--input", LARGE).stdout
    )
    # No such run; a run that waits for another; one that ended, never asking for it.
    unknown = ["nope", f"{run_id}-confirm-0"]
    for wrong in unknown:
        refused = skilldesk(env, "approvals", "approve", wrong)
        assert refused.returncode == 1, refused.stdout
        assert refused.stderr == (
            f"skilldesk: there is no approval {wrong!r}; `skilldesk approvals list` lists "
            "those waiting\n"
        )
    rejected = skilldesk(env, "approvals", "reject", approval, "--comment", "Past 30 days")
    assert rejected.returncode == 0, rejected.stderr
    assert rejected.stdout.splitlines() == [
        f"rejected {approval}",
        "  approve: ok",
        "  refused: ok",
        f"{run_id} SUCCEEDED",
        "The refund for ORD1002 was refused: Past 30 days.",
    ]
    shown = json.loads(skilldesk(env, "approvals", "show", approval, "--json").stdout)
    assert (shown["status"], shown["decision"]["comment"]) == ("rejected", "Past 30 days")
    for wrong in unknown:
        for command in ("show", "approve", "reject"):
            done = skilldesk(env, "approvals", command, wrong)
            assert done.returncode == 1, done.stdout
            assert done.stderr == (
                f"skilldesk: there is no approval {wrong!r}; `skilldesk approvals list` lists "
                "those waiting\n"
            )


def test_a_run_with_two_gates_waits_again_then_its_model_node_runs(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    workflows = tmp_path / "workflows"
    workflows.mkdir()
    (workflows / "two-gates.yaml").write_text(TWO_GATES, encoding="utf-8")
    env = environment(
        tmp_path,
        SKILLDESK_WORKFLOWS_DIR=str(workflows),
        SKILLDESK_MODEL="openai/fake-model",
        SKILLDESK_MODEL_API_BASE=fake_llm.base_url,
        SKILLDESK_MODEL_API_KEY="sk-test",
    )
    run_id, first = waiting_for(skilldesk(env, "workflows", "run", "two-gates").stdout)
    assert first == f"{run_id}-first-0"
    once = skilldesk(env, "approvals", "approve", first)
    assert once.returncode == 0, once.stderr
    assert once.stdout.splitlines()[:2] == [f"approved {first}", "  first: ok"]
    assert waiting_for(once.stdout) == (run_id, f"{run_id}-second-0")
    assert f"`skilldesk approvals approve {run_id}-second-0`" in once.stdout
    [pending] = json.loads(skilldesk(env, "approvals", "list", "--json").stdout)
    assert (pending["approval_id"], pending["summary"]) == (f"{run_id}-second-0", "Second: really?")

    fake_llm.script(Reply(content="Both approvals were given."))
    twice = skilldesk(env, "approvals", "approve", f"{run_id}-second-0", "--json")
    assert twice.returncode == 0, twice.stderr
    record = json.loads(twice.stdout)
    assert (record["status"], record["outputs"]) == (
        "SUCCEEDED",
        {"message": "Both approvals were given."},
    )
    # QA: --json printed the run's stored record, its bookkeeping too (`fingerprint`,
    # `checkpoint`, `via`, `decided`, `user`): the public shape, as POST /v1/approvals/{id}.
    assert set(record) == set(RunPublic.model_fields)
    assert not {"fingerprint", "checkpoint", "via", "decided", "user"} & set(record)
    assert record == RunPublic.model_validate(record).model_dump(mode="json")
    assert [n for n, s in record["nodes"].items() if s["status"] == "done"] == [
        "first",
        "second",
        "write",
    ]


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        (tmp_path / "data").mkdir()
        yield f"sqlite:///{tmp_path / 'data' / 'skilldesk.sqlite'}"
        return
    with schema_url() as url:
        yield url


def test_deciding_beside_a_live_service_on_its_store(
    make_settings: Any, store_url: str, tmp_path: Path
) -> None:
    settings = make_settings(
        checkpoint_url=store_url,
        skills_dir=ROOT / "skills",
        workflows_dir=ROOT / "workflows",
        retention_interval_s=0,
    )
    env = environment(tmp_path, SKILLDESK_CHECKPOINT_URL=store_url)
    start = {"inputs": {"order_id": "ORD1002"}, "thread_id": "t-live"}
    with TestClient(create_app(settings)) as client:

        def waiting_run() -> tuple[str, str]:
            started = client.post("/v1/workflows/refund-request/runs", json=start).json()
            assert started["status"] == "WAITING", started
            return started["id"], started["waiting"]["approval_id"]

        # Decided here, the run goes on here; the service sees it ended and its thread told.
        run_id, approval = waiting_run()
        approved = skilldesk(env, "approvals", "approve", approval, "--by", "alice")
        assert approved.returncode == 0, approved.stderr
        assert client.get(f"/v1/workflow-runs/{run_id}").json()["status"] == "SUCCEEDED"
        told = client.get("/v1/threads/t-live").json()["messages"][-1]["content"]
        assert told == "The refund of 488.0 CNY for ORD1002 is approved."
        late = client.post(f"/v1/approvals/{approval}", json={"decision": "reject"})
        assert late.status_code == 409, late.text
        assert "approved by alice" in late.json()["error"]["message"]

        # Decided through the service first: refused here, naming the decision.
        run_id, approval = waiting_run()
        assert client.post(f"/v1/approvals/{approval}", json={"decision": "reject"}).is_success
        refused = skilldesk(env, "approvals", "approve", approval)
        assert refused.returncode == 1, refused.stdout
        assert f"approval {approval} was decided already: rejected by " in refused.stderr

        # Cancelled through the service: it can no longer be decided.
        run_id, approval = waiting_run()
        assert client.post(f"/v1/workflow-runs/{run_id}/cancel").is_success
        withdrawn = skilldesk(env, "approvals", "approve", approval)
        assert withdrawn.returncode == 1, withdrawn.stdout
        assert (
            f"approval {approval} can no longer be decided: its run {run_id} ended CANCELLED "
            "without a decision"
        ) in withdrawn.stderr
        shown = json.loads(skilldesk(env, "approvals", "show", approval, "--json").stdout)
        assert (shown["status"], shown["run_status"]) == ("withdrawn", "CANCELLED")
        # QA: what it asked, and when, as while it waited (it showed "-").
        assert shown["summary"]
        assert shown["asked"] is not None
        assert client.get(f"/v1/workflow-runs/{run_id}").json()["status"] == "CANCELLED"


def test_an_interrupted_decision_leaves_its_run_for_the_service_to_resume(
    make_settings: Any, tmp_path: Path
) -> None:
    skills, workflows = tmp_path / "skills", tmp_path / "workflows"
    # The node works until the test lets it finish: cut off mid-way however slow the machine.
    go, begun = tmp_path / "go", tmp_path / "begun"
    handler = (
        "import pathlib, time\n\ndef slow_work():\n"
        f"    pathlib.Path({str(begun)!r}).touch()\n"
        f"    while not pathlib.Path({str(go)!r}).exists():\n"
        "        time.sleep(0.05)\n"
        "    return 'slow work done'\n"
    )
    write_skill(
        skills, "slow", config={"tools": [tool("slow_work", "handler:slow_work")]}, handler=handler
    )
    workflows.mkdir()
    (workflows / "slow-after.yaml").write_text(SLOW_AFTER, encoding="utf-8")
    env = environment(
        tmp_path, SKILLDESK_SKILLS_DIR=str(skills), SKILLDESK_WORKFLOWS_DIR=str(workflows)
    )
    run_id, approval = waiting_for(
        skilldesk(env, "workflows", "run", "slow-after", "--thread", "t-slow").stdout
    )
    store = sqlite_url((tmp_path / "data" / "skilldesk.sqlite").resolve())

    async def stored() -> dict[str, Any]:
        async with open_checkpointer(store) as saver:
            record = await documents_for(saver).get("workflow_run", run_id)
            assert record is not None
            return record

    deciding = subprocess.Popen(
        [SKILLDESK, "approvals", "approve", approval, "--by", "alice"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not begun.exists():  # decided, and the run went on to its slow node
        assert time.monotonic() < deadline, deciding.poll()
        time.sleep(0.1)
    assert asyncio.run(stored())["status"] == "RUNNING"
    deciding.send_signal(signal.SIGINT)
    out, err = deciding.communicate(timeout=60)
    assert deciding.returncode == 130, out + err
    assert (
        f"skilldesk: interrupted: approval {approval} is decided, and its run {run_id} was cut "
        "off; it goes on from its last step where it is resumed (the service resumes it at "
        "its next start)"
    ) in err
    left = asyncio.run(stored())
    assert (left["status"], left["decided"]) == ("RUNNING", [approval])
    go.touch()

    # The service's next start goes on with it, with the decision given, and tells the thread.
    settings = make_settings(skills_dir=skills, workflows_dir=workflows)

    async def resumed() -> tuple[dict[str, Any], list[Any]]:
        async with open_services(settings) as services:
            while (record := await services.engine.get_run(run_id))["status"] == "RUNNING":
                assert time.monotonic() < deadline + 60
                await asyncio.sleep(0.1)
            # Its thread is told after the run is stored as ended: wait for that too.
            while not (told := await services.conversations.history("t-slow")) or (
                told[-1].text != "slow work done"
            ):
                if time.monotonic() > deadline + 90:
                    return record, told
                await asyncio.sleep(0.1)
            return record, told

    record, told = asyncio.run(resumed())
    assert (record["status"], record["outputs"]) == ("SUCCEEDED", {"message": "slow work done"})
    assert record["nodes"]["ok"]["output"]["by"] == "alice"
    assert told[-1].text == "slow work done"


def test_the_outcome_waits_for_the_answer_another_process_gives_its_thread(
    make_settings: Any, tmp_path: Path
) -> None:
    # SQLite has no thread leases across processes: the outcome written while the service
    # answers the thread would be lost under that turn's next checkpoint.
    env = environment(tmp_path)
    _, approval = waiting_for(
        skilldesk(
            env, "workflows", "run", "refund-request", "--input", LARGE, "--thread", "t-busy"
        ).stdout
    )
    answering = subprocess.Popen(  # stands for the service, answering the thread for 10 s
        [
            sys.executable,
            "-c",
            "import time; from agents.state.leases import this_process; "
            "print(this_process(), flush=True); time.sleep(10)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert answering.stdout is not None
    process = answering.stdout.readline().strip()
    settings = make_settings(skills_dir=ROOT / "skills", workflows_dir=ROOT / "workflows")

    async def mark(**changes: Any) -> list[Any]:
        async with open_services(settings, background=False) as services:
            await services.threads.records.update("t-busy", **changes)
            return await services.conversations.history("t-busy")

    asyncio.run(mark(status="running", process=process))
    approved = skilldesk(env, "approvals", "approve", approval)
    assert approved.returncode == 0, approved.stderr
    assert answering.poll() is not None  # it ended before the outcome was written
    assert approved.stderr == (
        "skilldesk: thread t-busy is answering a message in another process; its run's "
        "outcome is written there once the answer is done\n"
    )
    told = asyncio.run(mark(status="idle"))
    assert told[-1].text == "The refund of 488.0 CNY for ORD1002 is approved."
