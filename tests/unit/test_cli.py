"""The ``skilldesk`` command tree: each group registered, a bad setting exits with status 2."""

from __future__ import annotations

import asyncio
import http.server
import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import pytest
import typer
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
        (["approvals"], ["list", "show", "approve", "reject"]),
    ],
)
def test_every_command_and_group_answers_help(args: list[str], lists: list[str]) -> None:
    done = CliRunner().invoke(cli, [*args, "--help"], prog_name="skilldesk")
    assert done.exit_code == 0, done.output
    assert all(word in done.output for word in lists)


def _tree(
    command: click.Command, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    yield path, command
    for name, sub in getattr(command, "commands", {}).items():
        yield from _tree(sub, (*path, name))


COMMANDS = list(_tree(typer.main.get_command(cli)))


@pytest.mark.parametrize(
    ("path", "command"), COMMANDS, ids=[" ".join(p) or "skilldesk" for p, _ in COMMANDS]
)
def test_help_flows_as_paragraphs_and_shows_each_text_as_written(
    path: tuple[str, ...], command: click.Command, monkeypatch: pytest.MonkeyPatch
) -> None:
    # QA: the help of a group's commands kept the docstrings' line breaks (cut mid-sentence),
    # and rich markup ate an option's "[chat]".
    monkeypatch.setenv("COLUMNS", "1000")  # wide enough that nothing wraps: one line a text
    done = CliRunner().invoke(cli, [*path, "--help"], prog_name="skilldesk")
    assert done.exit_code == 0, done.output
    shown = click.unstyle(done.output)
    subcommands = getattr(command, "commands", {}).values()
    texts = [command.help, *(getattr(p, "help", None) for p in command.params)]
    texts += [sub.help.split("\n\n")[0] for sub in subcommands if sub.help]
    for text in filter(None, texts):
        for paragraph in text.split("\n\n"):
            assert " ".join(paragraph.split()) in shown  # on one line, as written


@pytest.mark.parametrize(
    ("path", "command"), COMMANDS, ids=[" ".join(p) or "skilldesk" for p, _ in COMMANDS]
)
def test_help_reads_as_plain_text_without_the_docstrings_markup(
    path: tuple[str, ...], command: click.Command
) -> None:
    # QA: `threads history --help` showed ``fork --checkpoint`` with its reST backquotes.
    done = CliRunner().invoke(cli, [*path, "--help"], prog_name="skilldesk")
    assert done.exit_code == 0, done.output
    assert "``" not in click.unstyle(done.output)


def test_an_option_the_groups_share_says_the_same_on_every_command() -> None:
    # QA: --data-dir said three things (and was defined three times) across the groups.
    said: dict[str, set[str | None]] = {}
    for path, command in COMMANDS:
        if path[:1] not in (("skills",), ("workflows",), ("threads",), ("keys",), ("approvals",)):
            continue  # serve and chat take their own (chat's data folder is in-process only)
        for param in command.params:
            for opt in set(param.opts) & {"--data-dir", "--checkpoint-url", "--json"}:
                said.setdefault(opt, set()).add(getattr(param, "help", None))
    assert set(said) == {"--data-dir", "--checkpoint-url", "--json"}
    assert {opt: len(helps) for opt, helps in said.items()} == dict.fromkeys(said, 1), said


def test_chat_with_no_service_at_the_url_names_it_and_how_to_start_one() -> None:
    with socket.socket() as bound:  # bound, never listening: a connection is refused
        bound.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{bound.getsockname()[1]}"
        done = CliRunner().invoke(cli, ["chat", "--url", url], input="hello\n", prog_name="x")
    assert done.exit_code == 1
    assert f"error: cannot reach the service at {url} (Connection refused)" in done.stderr
    assert "start it with `skilldesk serve` (or `make run`)" in done.stderr
    assert "give its address with --url" in done.stderr


class NoChatHere(http.server.BaseHTTPRequestHandler):
    """A server with no /v1/chat/completions: 404 to any POST."""

    def do_POST(self) -> None:
        self.send_error(404)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class QuietFiles(http.server.SimpleHTTPRequestHandler):
    """`python -m http.server`: it takes no POST (501)."""

    def log_message(self, format: str, *args: Any) -> None:
        pass


class AnotherUsersThread(NoChatHere):
    """Skilldesk's 404 for a thread of another user's: the route is there."""

    def do_POST(self) -> None:
        body = json.dumps(
            {"error": {"message": "There is no thread 't'.", "code": "thread_not_found"}}
        ).encode()
        self.send_response(404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def http_server(request: pytest.FixtureRequest) -> Iterator[str]:
    """A server on a free loopback port answering with ``request.param`` (a handler class)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), request.param)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("http_server", [NoChatHere, QuietFiles], indirect=True, ids=["404", "501"])
def test_chat_with_a_server_that_is_not_skilldesk_at_the_url_says_so_and_to_check_it(
    http_server: str,
) -> None:
    # QA: a server answering 404 printed the SDK's "Error code: 404 - ..." and nothing more.
    done = CliRunner().invoke(
        cli, ["chat", "--url", http_server], input="hello\nagain\n", prog_name="skilldesk"
    )
    assert done.exit_code == 1
    assert done.stderr.count("error: ") == 1  # said once: every next message would go there
    assert f"the server at {http_server} is not a Skilldesk service" in done.stderr
    assert "it has no /v1/chat/completions" in done.stderr
    assert "check --url" in done.stderr
    assert "Error code" not in done.stderr


@pytest.mark.parametrize("http_server", [AnotherUsersThread], indirect=True)
def test_chat_does_not_call_a_skilldesk_404_a_server_that_is_not_skilldesk(
    http_server: str,
) -> None:
    done = CliRunner().invoke(cli, ["chat", "--url", http_server], input="hello\n", prog_name="x")
    assert done.exit_code == 1
    assert "There is no thread 't'." in done.stderr  # what the service said
    assert "not a Skilldesk service" not in done.stderr


def test_chat_refuses_a_url_that_is_not_an_http_address_with_status_2() -> None:
    done = CliRunner().invoke(
        cli, ["chat", "--url", "127.0.0.1:8000"], input="hello\n", prog_name="skilldesk"
    )
    assert done.exit_code == 2
    assert "write it as http://HOST:PORT" in done.stderr
    assert "thread" not in done.stderr  # refused before the conversation starts


def test_skills_examples_reads_the_store_in_the_data_dir_given(
    make_settings: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from app.services import open_services

    settings = make_settings()

    async def learn() -> str:
        async with open_services(settings, watch=False, background=False) as services:
            assert services.learned is not None
            example = await services.learned.learn(
                "greet", "please greet the visitors", thread_id="t-1", run_id="r-1", how="noted"
            )
            assert example is not None
            return example.id

    example_id = asyncio.run(learn())
    monkeypatch.setenv("SKILLDESK_DATA_DIR", str(tmp_path / "another"))  # --data-dir wins
    monkeypatch.setenv("SKILLDESK_SKILLS_DIR", str(settings.skills_dir))
    args = ["skills", "examples", "greet", "--data-dir", str(settings.data_dir), "--json"]
    done = CliRunner().invoke(cli, args, prog_name="skilldesk")
    assert done.exit_code == 0, done.output
    assert [e["id"] for e in json.loads(done.stdout)["examples"]] == [example_id]


def test_skills_examples_with_a_store_that_does_not_answer_exits_2_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SKILLDESK_SKILLS_DIR", str(tmp_path / "skills"))
    with socket.socket() as bound:
        bound.bind(("127.0.0.1", 0))
        store = f"postgresql://skilldesk@127.0.0.1:{bound.getsockname()[1]}/skilldesk"
        done = CliRunner().invoke(
            cli, ["skills", "examples", "greet", "--checkpoint-url", store], prog_name="skilldesk"
        )
    assert done.exit_code == 2, done.output
    assert "configuration error: cannot connect to PostgreSQL" in done.stderr


def _folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, data: bool = True) -> None:
    """Skills, workflows (``greet``) and, with ``data``, the data folder under ``tmp_path``,
    as the settings name them; no embeddings (no model to load)."""
    (tmp_path / "workflows").mkdir(exist_ok=True)
    (tmp_path / "workflows" / "greet.yaml").write_text(GREET)
    if data:
        monkeypatch.setenv("SKILLDESK_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("SKILLDESK_WORKFLOWS_DIR", str(tmp_path / "workflows"))
    monkeypatch.setenv("SKILLDESK_SKILLS_DIR", str(tmp_path / "skills"))
    monkeypatch.setenv("SKILLDESK_SKILLS_EMBEDDINGS", "false")


@pytest.mark.parametrize(
    "args",
    [
        ["workflows", "run", "greet"],
        ["workflows", "runs"],
        ["threads", "list"],
        ["keys", "list"],
        ["skills", "examples", "greet"],
        ["approvals", "list"],
        ["approvals", "approve", "a-1"],
        ["chat"],
    ],
    ids=" ".join,
)
def test_every_command_on_a_store_that_does_not_answer_exits_2_naming_the_setting(
    args: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # QA: `workflows run` and `runs` printed a traceback; `threads` exited 1, the rest 2.
    _folders(tmp_path, monkeypatch)
    with socket.socket() as bound:  # bound, never listening: a connection is refused
        bound.bind(("127.0.0.1", 0))
        store = f"postgresql://skilldesk@127.0.0.1:{bound.getsockname()[1]}/skilldesk"
        monkeypatch.setenv("SKILLDESK_CHECKPOINT_URL", store)
        done = CliRunner().invoke(cli, args, input="hello\n", prog_name="skilldesk")
    assert done.exit_code == 2, done.exception or done.output
    assert "skilldesk: configuration error: cannot connect to PostgreSQL" in done.stderr
    assert "SKILLDESK_CHECKPOINT_URL" in done.stderr


STORE_COMMANDS = [
    ["threads", "list"],
    ["threads", "show", "t-1"],
    ["threads", "history", "t-1"],
    ["threads", "fork", "t-1", "--checkpoint", "c-1"],
    ["threads", "delete", "t-1", "--yes"],
    ["threads", "prune"],
    ["keys", "create", "alice"],
    ["keys", "list"],
    ["keys", "revoke", "key_000000000000"],
    ["skills", "examples", "greet"],
    ["workflows", "runs"],
    ["approvals", "list"],
    ["approvals", "show", "a-1"],
    ["approvals", "approve", "a-1"],
    ["approvals", "reject", "a-1"],
]


@pytest.mark.parametrize("where", ["no folder", "a folder without it", "no SQLite file"])
@pytest.mark.parametrize("args", STORE_COMMANDS, ids=" ".join)
def test_a_command_on_the_store_refuses_a_store_that_is_not_there_and_makes_none(
    args: list[str], where: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # QA: a mistyped --data-dir made a new, empty store that no service reads: `keys create`
    # printed a key "in force" in it, `threads list` said "no threads", both with status 0.
    _folders(tmp_path, monkeypatch)
    typo = tmp_path / "d1-typo"
    if where == "no SQLite file":
        store = typo / "threads.sqlite"
        monkeypatch.setenv("SKILLDESK_CHECKPOINT_URL", sqlite_url(store))
        given, named = (
            [],
            [f"the SQLite store {store} (--checkpoint-url / SKILLDESK_CHECKPOINT_URL)"],
        )
    else:
        if where == "a folder without it":
            typo.mkdir()
        store = typo.resolve() / "skilldesk.sqlite"
        given, named = ["--data-dir", str(typo)], [f"{typo} (--data-dir / SKILLDESK_DATA_DIR)"]
    done = CliRunner().invoke(cli, [*args, *given], prog_name="skilldesk")
    assert done.exit_code == 2, done.exception or done.output
    assert done.stderr.startswith("skilldesk: configuration error: ")
    assert all(name in done.stderr for name in named), done.stderr
    assert "The service keeps its store in its data folder, as skilldesk.sqlite" in done.stderr
    assert ("add --create" in done.stderr) == (args[:2] == ["keys", "create"])
    assert not store.exists()
    assert typo.exists() == (where == "a folder without it")  # nothing made


# The commands that read the records of name owners kept in the data folder (not the store),
# and how the folder is named. `skills validate DIR` reads only --data-dir's (documented).
RECORDS_COMMANDS = [
    (args, how)
    for args in (
        ["skills", "list"],
        ["skills", "validate"],
        ["workflows", "list"],
        ["workflows", "validate"],
        ["workflows", "validate", "GREET"],
    )
    for how in ("--data-dir", "SKILLDESK_DATA_DIR")
] + [(["skills", "validate", "SKILLS"], "--data-dir")]


@pytest.mark.parametrize(
    ("args", "how"), RECORDS_COMMANDS, ids=[f"{' '.join(a)} {h}" for a, h in RECORDS_COMMANDS]
)
def test_a_command_reading_the_owners_records_refuses_a_data_folder_named_that_is_not_there(
    args: list[str], how: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # QA: with a mistyped --data-dir they carried on as with a folder without records (a
    # contested name went to the older definition, where the service gives it to its owner),
    # while the commands on the store refused it, exit 2.
    _folders(tmp_path, monkeypatch, data=False)
    (tmp_path / "skills").mkdir()
    folders = {"SKILLS": str(tmp_path / "skills"), "GREET": str(tmp_path / "workflows/greet.yaml")}
    args = [folders.get(a, a) for a in args]

    def invoke(folder: Path | None) -> Any:
        monkeypatch.delenv("SKILLDESK_DATA_DIR", raising=False)
        given = []
        if folder is not None and how == "--data-dir":
            given = ["--data-dir", str(folder)]
        elif folder is not None:
            monkeypatch.setenv("SKILLDESK_DATA_DIR", str(folder))
        return CliRunner().invoke(cli, [*args, *given], prog_name="skilldesk")

    typo = tmp_path / "d1-typo"
    done = invoke(typo)
    assert done.exit_code == 2, done.exception or done.output
    directory = args[:2] == ["skills", "validate"] and len(args) == 3
    said = "--data-dir" if directory else "--data-dir / SKILLDESK_DATA_DIR"
    assert done.stderr.startswith(
        f"skilldesk: configuration error: the data folder {typo} ({said}) does not exist"
    ), done.stderr
    assert "fix: give the data folder of the service" in done.stderr
    assert not typo.exists()
    # An empty folder holds no records, as a first start's; so does the default one, missing
    # (no service ran in this checkout yet).
    (tmp_path / "empty").mkdir()
    assert invoke(tmp_path / "empty").exit_code == 0
    monkeypatch.setattr("app.settings.service.ROOT", tmp_path / "checkout")
    assert invoke(None).exit_code == 0
    assert not (tmp_path / "checkout").exists()


def test_chat_in_process_and_workflows_run_still_make_the_store_of_a_new_data_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A fresh install works with one command: only the commands that read or change what a
    # service stored refuse a store that is not there.
    _folders(tmp_path, monkeypatch, data=False)
    for command, folder in ((["chat"], "chatted"), (["workflows", "run", "greet"], "ran")):
        args = [*command, "--data-dir", str(tmp_path / folder)]
        done = CliRunner().invoke(cli, args, input="hello\n", prog_name="skilldesk")
        assert done.exit_code == 0, done.exception or done.output
        assert (tmp_path / folder / "skilldesk.sqlite").is_file()


def test_skills_search_with_an_embedding_model_that_is_not_one_exits_2_naming_the_setting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SKILLDESK_SKILLS_DIR", str(tmp_path / "skills"))
    monkeypatch.setenv("SKILLDESK_SKILLS_EMBEDDING_MODEL", str(tmp_path))  # no model there
    done = CliRunner().invoke(cli, ["skills", "search", "refund"], prog_name="skilldesk")
    assert done.exit_code == 2, done.exception or done.output
    assert done.stderr.startswith("skilldesk: configuration error: ")
    assert "SKILLDESK_SKILLS_EMBEDDING_MODEL" in done.stderr


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
