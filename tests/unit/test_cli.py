"""The ``skilldesk`` command tree: each group registered, a bad setting exits with status 2."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agents.state.checkpointers import open_checkpointer, sqlite_url
from agents.state.documents import documents_for
from app.cli import cli

GREET = """
name: greet
description: Sets a greeting.
nodes:
  - {id: hello, kind: set, values: {text: hi}}
outputs: {message: "{{ nodes.hello.output.text }}"}
"""


@pytest.mark.parametrize(
    ("args", "lists"),
    [
        ([], ["serve", "chat", "skills", "workflows"]),
        (["serve"], ["--host", "--port", "--data-dir", "--skills-dir", "--workflows-dir"]),
        (["chat"], ["--url", "--thread", "--data-dir", "--api-key"]),
        (["skills"], ["list", "validate", "search", "new"]),
        (["workflows"], ["list", "validate", "graph"]),
    ],
)
def test_every_command_and_group_answers_help(args: list[str], lists: list[str]) -> None:
    done = CliRunner().invoke(cli, [*args, "--help"], prog_name="skilldesk")
    assert done.exit_code == 0, done.output
    assert all(word in done.output for word in lists)


def test_a_bad_setting_exits_2_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SKILLDESK_PORT", "eighty")
    done = CliRunner().invoke(cli, ["serve"], prog_name="skilldesk")
    assert done.exit_code == 2
    assert "SKILLDESK_PORT" in done.output


def test_workflows_runs_refuses_a_status_that_is_not_one_with_status_2() -> None:
    done = CliRunner().invoke(cli, ["workflows", "runs", "--status", "bogus"], prog_name="x")
    assert done.exit_code == 2
    assert "'bogus' is not a run status" in done.output
    assert "RUNNING, WAITING, SUCCEEDED, FAILED, CANCELLED" in done.output


def test_workflows_commands_leave_a_live_servers_running_run_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "workflows").mkdir()
    (tmp_path / "workflows" / "greet.yaml").write_text(GREET)
    monkeypatch.setenv("SKILLDESK_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("SKILLDESK_WORKFLOWS_DIR", str(tmp_path / "workflows"))
    monkeypatch.setenv("SKILLDESK_SKILLS_DIR", str(tmp_path / "skills"))
    (tmp_path / "data").mkdir()
    url = sqlite_url((tmp_path / "data" / "skilldesk.sqlite").resolve())
    running = {
        "id": "r-1",
        "workflow": "greet",
        "version": 1,
        "thread_id": None,
        "status": "RUNNING",
        "started": time.time(),
        "inputs": {},
        "nodes": {},
        "outputs": {},
        "error": None,
        "waiting": None,
    }

    async def store(record: dict[str, Any] | None) -> dict[str, Any] | None:
        async with open_checkpointer(url) as saver:
            documents = documents_for(saver)
            if record is not None:
                await documents.put("workflow_run", "r-1", record, status="RUNNING")
            return await documents.get("workflow_run", "r-1")

    asyncio.run(store(running))  # a run the server has under way
    for command, says in ((["run", "greet"], "SUCCEEDED"), (["runs"], "RUNNING")):
        done = CliRunner().invoke(cli, ["workflows", *command], prog_name="skilldesk")
        assert done.exit_code == 0, done.output
        assert says in done.output
    time.sleep(0.2)
    assert asyncio.run(store(None)) == running
