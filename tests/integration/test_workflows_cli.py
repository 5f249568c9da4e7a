"""`skilldesk workflows ...` through its entry point, in the shapes other tools script against."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from app.api.schemas.workflows import RunPublic
from tests.skillkit import tool, write_skill
from tests.workflowkit import alias_bomb

SKILLDESK = str(Path(sys.executable).with_name("skilldesk"))
ROOT = Path(__file__).resolve().parents[2]


def run(*args: str, tmp_path: Path, **env_extra: str) -> subprocess.CompletedProcess[str]:
    # The data folder named must be there: a missing one is refused (as a mistyped folder).
    (tmp_path / "data").mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKILLDESK_")}
    env.update(
        {
            "SKILLDESK_DATA_DIR": str(tmp_path / "data"),
            "SKILLDESK_SKILLS_DIR": str(tmp_path / "skills"),
            "SKILLDESK_WORKFLOWS_DIR": str(tmp_path / "workflows"),
            "SKILLDESK_SKILLS_EMBEDDINGS": "false",
            **env_extra,
        }
    )
    return subprocess.run(
        [SKILLDESK, "workflows", *args], env=env, capture_output=True, text=True, timeout=120
    )


def setup(tmp_path: Path) -> Path:
    write_skill(
        tmp_path / "skills",
        "device-alarms",
        config={"tools": [tool("list_alarms", "handler:list_alarms", {"device_id": {}})]},
        handler="def list_alarms(device_id=None):\n    return []\n",
    )
    folder = tmp_path / "workflows"
    folder.mkdir()
    good = {
        "name": "alarm-check",
        "version": 3,
        "description": "Check a device's alarms and say how many.",
        "inputs": {"device_id": {"type": "string"}},
        "nodes": [
            {
                "id": "alarms",
                "kind": "tool",
                "tool": "list_alarms",
                "arguments": {"device_id": "{{ inputs.device_id }}"},
            },
            {"id": "tell", "kind": "notify", "message": "{{ nodes.alarms.output | length }}"},
        ],
    }
    (folder / "alarm-check.yaml").write_text(yaml.safe_dump(good, sort_keys=False), "utf-8")
    (folder / "broken.yaml").write_text(
        textwrap.dedent(
            """\
            name: broken
            description: Names a tool nobody offers.
            nodes:
              - {id: order, kind: tool, tool: get_order}
            """
        ),
        encoding="utf-8",
    )
    return folder


def test_validate_json_reports_loaded_and_errors_and_exits_1(tmp_path: Path) -> None:
    folder = setup(tmp_path)
    done = run("validate", "--json", tmp_path=tmp_path)
    assert done.returncode == 1, done.stderr
    assert json.loads(done.stdout) == {
        "loaded": ["alarm-check"],
        "errors": [
            {
                "file": str(folder / "broken.yaml"),
                "node": "order",
                "line": 4,
                "message": "tool: 'get_order' is not installed: no skill offers it (the tools: "
                "list_alarms)",
            }
        ],
    }


def test_validate_files_exits_0_when_they_are_good(tmp_path: Path) -> None:
    folder = setup(tmp_path)
    done = run("validate", str(folder / "alarm-check.yaml"), "--json", tmp_path=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout) == {"loaded": ["alarm-check"], "errors": []}
    text = run("validate", str(folder / "alarm-check.yaml"), tmp_path=tmp_path)
    assert text.stdout.splitlines() == ["ok      alarm-check", "1 loaded, 0 problem(s)"]


def test_validate_names_every_problem_of_a_file_in_one_pass(tmp_path: Path) -> None:
    # QA: each run named one stage: the unknown kind, then the template, then the tool.
    folder = setup(tmp_path)
    staged = folder / "broken.yaml"
    staged.write_text(
        textwrap.dedent(
            """\
            name: broken
            description: Three problems.
            nodes:
              - {id: a, kind: tool, tool: no_such_tool}
              - {id: b, kind: set, values: {y: "{{ nodes.zzz.output }}"}}
              - {id: c, kind: bogus}
            """
        ),
        encoding="utf-8",
    )
    for args in (["--json"], [str(staged), "--json"]):  # the folder's service, a file given
        done = run("validate", *args, tmp_path=tmp_path)
        assert done.returncode == 1, done.stderr
        errors = json.loads(done.stdout)["errors"]
        assert [(e["node"], e["line"], e["message"].split(":")[0]) for e in errors] == [
            ("a", 4, "tool"),
            ("b", 5, "values.y"),
            ("c", 6, "kind"),
        ], args


def test_validate_reports_files_whose_aliases_expand_without_end(tmp_path: Path) -> None:
    # Once a traceback (RecursionError), and minutes of a growing process for the bomb.
    folder = setup(tmp_path)
    anchor, laughs = folder / "anchor.yaml", folder / "laughs.yaml"
    anchor.write_text("name: k-anchor\ndescription: &a [*a]\nnodes: []\n", encoding="utf-8")
    laughs.write_text("name: l-laughs\nnodes: []\n" + alias_bomb(), encoding="utf-8")
    for args in (["--json"], [str(anchor), str(laughs), "--json"]):
        done = run("validate", *args, tmp_path=tmp_path)
        assert done.returncode == 1, done.stderr
        assert "Traceback" not in done.stderr
        report = json.loads(done.stdout)
        found = {(Path(e["file"]).name, e["line"]): e["message"] for e in report["errors"]}
        assert "an alias to &a is inside the node it names" in found["anchor.yaml", 2]
        assert found["laughs.yaml", 8].startswith("&l5 expands to more than 250,000 values")


def test_validate_a_file_outside_the_folder_with_a_model_profile_check(tmp_path: Path) -> None:
    setup(tmp_path)
    draft = tmp_path / "draft.yml"
    draft.write_text(
        textwrap.dedent(
            """\
            name: draft
            description: Writes with a profile that is not configured.
            nodes:
              - {id: write, kind: llm, prompt: Hello, model: fast}
              - {id: sub, kind: workflow, workflow: alarm-check, inputs: {device_id: D1}}
            """
        ),
        encoding="utf-8",
    )
    models = tmp_path / "models.yaml"
    models.write_text("profiles:\n  default: {model: openai/gpt-4o-mini}\n", encoding="utf-8")
    done = run(
        "validate", str(draft), "--json", tmp_path=tmp_path, SKILLDESK_MODELS_FILE=str(models)
    )
    report = json.loads(done.stdout)
    assert report["loaded"] == []
    assert [(e["node"], e["line"]) for e in report["errors"]] == [("write", 4)]
    assert "profile 'fast' is not configured" in report["errors"][0]["message"]
    # Without any model configured, profiles are not checked.
    assert run("validate", str(draft), tmp_path=tmp_path).returncode == 0


def test_validate_a_file_whose_sub_workflow_can_wait_for_an_approval(tmp_path: Path) -> None:
    # As the service refuses it: the file's child (in the folder) would wait inside the node.
    folder = setup(tmp_path)
    (folder / "gated.yaml").write_text(
        "name: gated\ndescription: Asks first.\nnodes:\n"
        "  - {id: ok, kind: approval, summary: Go?}\n",
        encoding="utf-8",
    )
    draft = tmp_path / "draft.yaml"
    draft.write_text(
        "name: draft\ndescription: Runs the gated one.\nnodes:\n"
        "  - {id: sub, kind: workflow, workflow: gated}\n",
        encoding="utf-8",
    )
    done = run("validate", str(draft), "--json", tmp_path=tmp_path)
    assert done.returncode == 1, done.stdout
    [error] = json.loads(done.stdout)["errors"]
    assert (error["node"], error["line"]) == ("sub", 4)
    assert error["message"].startswith("workflow: 'gated' can wait for an approval")


def test_validate_a_folder_checks_it_on_its_own(tmp_path: Path) -> None:
    # QA: a copy of the configured folder, given, was reported as duplicating each of its
    # workflows; a folder given is checked as a service serving it would load it.
    folder = setup(tmp_path)
    copy = tmp_path / "copy"
    copy.mkdir()
    (copy / "alarm-check.yaml").write_text(
        (folder / "alarm-check.yaml").read_text("utf-8"), encoding="utf-8"
    )
    (folder / "gated.yaml").write_text(
        "name: gated\ndescription: Asks first.\nnodes:\n"
        "  - {id: ok, kind: approval, summary: Go?}\n",
        encoding="utf-8",
    )
    (copy / "runner.yaml").write_text(
        "name: runner\ndescription: Runs the others.\nnodes:\n"
        "  - {id: check, kind: workflow, workflow: alarm-check, inputs: {device_id: D1}}\n"
        "  - {id: gate, kind: workflow, workflow: gated}\n",
        encoding="utf-8",
    )
    done = run("validate", str(copy), "--json", tmp_path=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    found = json.loads(done.stdout)
    assert found["loaded"] == ["alarm-check"]
    # Not the configured folder's workflows either: `gated` is not in the copy.
    [error] = found["errors"]
    assert (Path(error["file"]), error["node"], error["line"]) == (copy / "runner.yaml", "gate", 5)
    assert error["message"].startswith("workflow: 'gated' is not loaded")
    # As --workflows-dir serves it; and a file of the folder given, named too, is its own.
    assert run("validate", "--workflows-dir", str(copy), "--json", tmp_path=tmp_path).stdout == (
        done.stdout
    )
    both = run("validate", str(copy), str(copy / "alarm-check.yaml"), "--json", tmp_path=tmp_path)
    assert both.stdout == done.stdout
    # The bundled folder, copied elsewhere, validates as it does in place.
    bundled = tmp_path / "bundled"
    bundled.mkdir()
    for source in sorted((ROOT / "workflows").glob("*.yaml")):
        (bundled / source.name).write_text(source.read_text("utf-8"), encoding="utf-8")
    done = run(
        "validate",
        str(bundled),
        "--json",
        tmp_path=tmp_path,
        SKILLDESK_WORKFLOWS_DIR=str(ROOT / "workflows"),
        SKILLDESK_SKILLS_DIR=str(ROOT / "skills"),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["loaded"] == sorted(p.stem for p in bundled.iterdir())


def test_list_json(tmp_path: Path) -> None:
    setup(tmp_path)
    done = run("list", "--json", tmp_path=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [
        {
            "name": "alarm-check",
            "version": 3,
            "description": "Check a device's alarms and say how many.",
            "nodes": ["alarms", "tell"],
        }
    ]
    assert "1 problem(s)" in run("list", tmp_path=tmp_path).stderr


def test_graph_prints_mermaid_and_names_close_matches(tmp_path: Path) -> None:
    setup(tmp_path)
    done = run("graph", "alarm-check", tmp_path=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "flowchart TD",
        '    alarms["alarms<br/>tool"]',
        '    tell["tell<br/>notify"]',
        "    alarms --> tell",
    ]
    missing = run("graph", "alarm-chek", tmp_path=tmp_path)
    assert missing.returncode == 2  # a bad name, as `workflows run` says it
    assert "did you mean 'alarm-check'?" in missing.stderr


def test_the_bundled_workflows_validate_against_the_bundled_skills(tmp_path: Path) -> None:
    done = run(
        "validate",
        "--json",
        "--workflows-dir",
        str(ROOT / "workflows"),
        "--skills-dir",
        str(ROOT / "skills"),
        tmp_path=tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["loaded"] == [
        "announcement",
        "equipment-maintenance",
        "order-overview",
        "refund-request",
    ]


def test_workflows_run_and_runs_with_the_bundled_refund(tmp_path: Path) -> None:
    bundled = {
        "SKILLDESK_SKILLS_DIR": str(ROOT / "skills"),
        "SKILLDESK_WORKFLOWS_DIR": str(ROOT / "workflows"),
    }
    small = run(
        "run", "refund-request", "--input", '{"order_id": "ORD1001"}', tmp_path=tmp_path, **bundled
    )
    assert small.returncode == 0, small.stderr
    assert "order: ok" in small.stdout
    assert "SUCCEEDED" in small.stdout
    assert "159" in small.stdout
    large = run(
        "run",
        "refund-request",
        "--input",
        '{"order_id": "ORD1002"}',
        "--json",
        tmp_path=tmp_path,
        **bundled,
    )
    assert large.returncode == 0, large.stderr
    waiting = json.loads(large.stdout)
    assert waiting["status"] == "WAITING"
    assert waiting["waiting"]["approval_id"].startswith(waiting["id"])
    public = set(RunPublic.model_fields)  # as the HTTP API shows a run, no bookkeeping
    assert set(waiting) <= public
    assert "fingerprint" not in waiting
    listed = run("runs", "--json", tmp_path=tmp_path, **bundled)
    records = json.loads(listed.stdout)
    assert [r["status"] for r in records] == ["WAITING", "SUCCEEDED"]
    assert all(set(r) <= public for r in records)
    # The data folder named on the command line is named again in the commands suggested.
    data = tmp_path / "data"
    named = run(
        "run",
        "refund-request",
        "--input",
        '{"order_id": "ORD1002"}',
        "--data-dir",
        str(data),
        tmp_path=tmp_path,
        **bundled,
    )
    approval = re.search(r"WAITING for approval (\S+):", named.stdout)
    assert approval is not None, named.stdout
    assert f"`skilldesk approvals approve {approval[1]} --data-dir {data}`" in named.stdout


def test_a_run_on_a_new_thread_makes_the_thread_it_is_to_be_told_in(tmp_path: Path) -> None:
    bundled = {
        "SKILLDESK_SKILLS_DIR": str(ROOT / "skills"),
        "SKILLDESK_WORKFLOWS_DIR": str(ROOT / "workflows"),
    }
    refused = run("run", "refund-request", "--thread", "wf-x", tmp_path=tmp_path, **bundled)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    started = run(
        "run",
        "refund-request",
        "--input",
        '{"order_id": "ORD1002"}',
        "--thread",
        "wf-cli",
        tmp_path=tmp_path,
        **bundled,
    )
    assert started.returncode == 0, started.stderr
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKILLDESK_")}
    env["SKILLDESK_DATA_DIR"] = str(tmp_path / "data")
    shown = [
        subprocess.run(
            [SKILLDESK, "threads", "show", thread, "--json"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        for thread in ("wf-cli", "wf-x")
    ]
    assert shown[0].returncode == 0, shown[0].stderr
    assert json.loads(shown[0].stdout)["title"] == "Workflow refund-request"
    assert shown[1].returncode != 0  # a refused start makes no thread


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("refund-request", "--input", "{nope"), "--input is not JSON"),
        (("refund-request", "--input", "[1]"), "must be a JSON object"),
        (("no-such-workflow",), "no-such-workflow"),
        (("refund-request",), "'order_id' is required"),
    ],
)
def test_workflows_run_refuses_what_it_cannot_run_with_status_2(
    tmp_path: Path, args: tuple[str, ...], says: str
) -> None:
    done = run(
        "run",
        *args,
        tmp_path=tmp_path,
        SKILLDESK_SKILLS_DIR=str(ROOT / "skills"),
        SKILLDESK_WORKFLOWS_DIR=str(ROOT / "workflows"),
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert says in done.stderr


@pytest.mark.parametrize(
    "args",
    [("run", "alarm-check", "--input", '{"device_id": "D1"}'), ("runs",)],
    ids=["run", "runs"],
)
def test_run_and_runs_on_a_store_that_does_not_answer_say_so_and_exit_2(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    # QA: both printed a traceback where `threads`, `keys` and `skills examples` named the setting.
    setup(tmp_path)
    with socket.socket() as bound:  # bound, never listening: a connection is refused
        bound.bind(("127.0.0.1", 0))
        store = f"postgresql://postgres@127.0.0.1:{bound.getsockname()[1]}/x"
        done = run(*args, tmp_path=tmp_path, SKILLDESK_CHECKPOINT_URL=store)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("skilldesk: configuration error: cannot connect to PostgreSQL")
    assert "(SKILLDESK_CHECKPOINT_URL)" in done.stderr
    assert "Traceback" not in done.stderr


def test_validate_files_finds_workflows_running_each_other_and_names_the_folder_holds(
    tmp_path: Path,
) -> None:
    # QA: with files named, `validate` passed two workflows that run each other, and one
    # named as a workflow of the configured folder, both of which the service refuses.
    folder = setup(tmp_path)
    elsewhere = tmp_path / "drafts"
    elsewhere.mkdir()
    for me, other in (("wf-mutual-a", "wf-mutual-b"), ("wf-mutual-b", "wf-mutual-a")):
        (elsewhere / f"{me}.yaml").write_text(
            f"name: {me}\ndescription: Runs {other}.\n"
            f"nodes:\n  - {{id: sub, kind: workflow, workflow: {other}}}\n",
            encoding="utf-8",
        )
    (elsewhere / "copy.yaml").write_text(
        (folder / "alarm-check.yaml").read_text("utf-8"), encoding="utf-8"
    )
    # The files given: the copy, as if dropped into the configured folder, clashes there.
    files = sorted(str(f) for f in elsewhere.iterdir())
    done = run("validate", *files, "--json", tmp_path=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    found = json.loads(done.stdout)
    assert found["loaded"] == []
    messages = {Path(e["file"]).name: e["message"] for e in found["errors"]}
    assert "workflows cannot nest in a loop" in messages["wf-mutual-a.yaml"]
    assert "workflows cannot nest in a loop" in messages["wf-mutual-b.yaml"]
    assert "'alarm-check' is already defined by" in messages["copy.yaml"]
    assert str(folder / "alarm-check.yaml") in messages["copy.yaml"]
    # The folder given is checked on its own: the loop still, the copy serves there.
    done = run("validate", str(elsewhere), "--json", tmp_path=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    found = json.loads(done.stdout)
    assert found["loaded"] == ["alarm-check"]
    assert sorted(Path(e["file"]).name for e in found["errors"]) == [
        "wf-mutual-a.yaml",
        "wf-mutual-b.yaml",
    ]
    # The folder's own file, named: no clash with itself.
    itself = run("validate", str(folder / "alarm-check.yaml"), "--json", tmp_path=tmp_path)
    assert json.loads(itself.stdout) == {"loaded": ["alarm-check"], "errors": []}
