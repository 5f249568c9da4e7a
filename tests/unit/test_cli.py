"""The ``skilldesk`` command tree: each group registered, a bad setting exits with status 2."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from app.cli import cli


@pytest.mark.parametrize(
    ("args", "lists"),
    [
        ([], ["serve", "chat", "skills", "workflows"]),
        (["serve"], ["--host", "--port", "--data-dir", "--skills-dir", "--workflows-dir"]),
        (["chat"], ["--url", "--thread", "--data-dir"]),
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
