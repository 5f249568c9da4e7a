"""`skilldesk skills ...` through its entry point, in the shapes other tools script against."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from agents.owners import tool_owners
from app.main import create_app
from tests.skillkit import tool, write_skill

SKILLDESK = str(Path(sys.executable).with_name("skilldesk"))
HANDLER = "def f():\n    return 1\n"


def run(*args: str, data_dir: Path, embeddings: bool = False) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKILLDESK_")}
    env.update(
        SKILLDESK_DATA_DIR=str(data_dir),
        SKILLDESK_SKILLS_EMBEDDINGS="true" if embeddings else "false",
    )
    return subprocess.run(
        [SKILLDESK, "skills", *args], env=env, capture_output=True, text=True, timeout=120
    )


def make_skills(root: Path) -> Path:
    write_skill(
        root,
        "order-query",
        "Look up orders by order number or status.",
        config={"triggers": ["order", "订单"], "tools": [tool("get_order", "handler:get_order")]},
        handler="def get_order():\n    return {}\n",
    )
    write_skill(
        root,
        "device-alarms",
        "List open alarms of shop-floor devices.",
        config={"triggers": ["alarm", "告警"]},
    )
    write_skill(root, "broken-one", frontmatter={"name": "wrong-name"})
    return root


def test_validate_json_reports_loaded_and_errors_and_exits_1(tmp_path: Path) -> None:
    skills = make_skills(tmp_path / "skills")
    done = run("validate", str(skills), "--json", data_dir=tmp_path)
    assert done.returncode == 1
    report = json.loads(done.stdout)
    assert report["loaded"] == ["device-alarms", "order-query"]
    assert report["errors"] == [
        {
            "skill": "broken-one",
            "file": "SKILL.md",
            "field": "name",
            "message": "is 'wrong-name' but the folder is 'broken-one'; the Agent Skills format "
            "requires them to be equal — rename one",
        }
    ]


def test_validate_one_good_folder_exits_0(tmp_path: Path) -> None:
    skills = make_skills(tmp_path / "skills")
    done = run("validate", str(skills / "order-query"), "--json", data_dir=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"loaded": ["order-query"], "errors": [], "warnings": []}


def test_a_skill_over_a_spec_limit_passes_validate_with_a_warning_and_fails_strict(
    tmp_path: Path,
) -> None:
    skills = tmp_path / "skills"
    write_skill(skills, "claude-api", "Build apps with the Claude API. " * 34)
    done = run("validate", str(skills), "--json", data_dir=tmp_path)
    assert done.returncode == 0, done.stdout
    report = json.loads(done.stdout)
    assert report["loaded"] == ["claude-api"]
    [warning] = report["warnings"]
    assert (warning["skill"], warning["field"]) == ("claude-api", "description")
    strict = run("validate", str(skills), "--json", "--strict", data_dir=tmp_path)
    assert strict.returncode == 1
    [error] = json.loads(strict.stdout)["errors"]
    assert error["field"] == "description"
    assert "shorten it" in error["message"]


def test_references_left_out_are_warnings_of_validate_and_of_the_skills_listing(
    tmp_path: Path, make_settings: Any
) -> None:
    # QA: the service logged them, while validate said nothing and --strict passed; a
    # folder linked from references/ was not even logged.
    outside = tmp_path / "system"
    outside.mkdir()
    (outside / "hostname").write_text("host")
    skills = tmp_path / "skills"
    linked = write_skill(skills, "linked", files={"references/own.md": "mine"})
    (linked / "references" / "host.md").symlink_to(outside / "hostname")
    (linked / "references" / "etc").symlink_to(outside, target_is_directory=True)
    done = run("validate", str(skills), "--json", data_dir=tmp_path)
    assert done.returncode == 0, done.stdout
    warnings = json.loads(done.stdout)["warnings"]
    assert [(w["skill"], w["file"], w["message"]) for w in warnings] == [
        (
            "linked",
            "references",
            "references/etc/ links outside the skill's folder; it is not listed",
        ),
        ("linked", "references", "references/host.md links outside the skill's folder"),
    ]
    assert run("validate", str(skills), "--strict", data_dir=tmp_path).returncode == 1

    with TestClient(create_app(make_settings(skills_dir=skills))) as client:
        listed = client.get("/v1/skills").json()
    assert [w["message"] for w in listed["warnings"]] == [w["message"] for w in warnings]
    assert listed["errors"] == []


def test_list_json(tmp_path: Path) -> None:
    skills = make_skills(tmp_path / "skills")
    done = run("list", "--skills-dir", str(skills), "--json", data_dir=tmp_path)
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert [(r["name"], r["tools"]) for r in rows] == [
        ("device-alarms", []),
        ("order-query", ["get_order"]),
    ]


def test_list_and_validate_follow_the_services_tool_owners_and_leave_the_record(
    tmp_path: Path,
) -> None:
    skills, data = make_skills(tmp_path / "skills"), tmp_path / "data"
    tool_owners(data).save({"get_order": "order-query"})  # as the service recorded it
    record = (data / "owners" / "tools.json").read_bytes()
    newcomer = write_skill(
        skills, "b-dup", config={"tools": [tool("get_order", "handler:f")]}, handler=HANDLER
    )
    for each in [newcomer, *newcomer.iterdir()]:
        os.utime(each, (0, 0))  # older than the owner: the record decides, not the age
    done = run("list", "--skills-dir", str(skills), "--json", data_dir=data)
    assert [r["name"] for r in json.loads(done.stdout)] == ["device-alarms", "order-query"]
    done = run("validate", str(skills), "--data-dir", str(data), "--json", data_dir=tmp_path)
    refused = [e for e in json.loads(done.stdout)["errors"] if e["skill"] == "b-dup"]
    assert "already defined by skill 'order-query'" in refused[0]["message"]
    assert (data / "owners" / "tools.json").read_bytes() == record
    (tmp_path / "fresh").mkdir()  # a data folder without records, as at a first start
    done = run("list", "--skills-dir", str(skills), "--json", data_dir=tmp_path / "fresh")
    assert "b-dup" in [r["name"] for r in json.loads(done.stdout)]  # no record: the older
    assert not (tmp_path / "fresh" / "owners").exists()


def test_search_queries_file_prints_one_json_line_per_query(tmp_path: Path) -> None:
    skills = make_skills(tmp_path / "skills")
    queries = tmp_path / "queries.txt"
    queries.write_text("where is my order\n\nCNC-001 有告警吗\n", encoding="utf-8")
    done = run(
        "search",
        "--queries-file",
        str(queries),
        "--skills-dir",
        str(skills),
        "--k",
        "2",
        "--json",
        data_dir=tmp_path,
        embeddings=True,
    )
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert [line["query"] for line in lines] == ["where is my order", "CNC-001 有告警吗"]
    assert [line["results"][0]["name"] for line in lines] == ["order-query", "device-alarms"]
    assert all(set(r) == {"name", "score"} for line in lines for r in line["results"])
    assert all(isinstance(line["ms"], float) for line in lines)
    assert len(lines[0]["results"]) <= 2


def test_search_positional_query(tmp_path: Path) -> None:
    skills = make_skills(tmp_path / "skills")
    done = run("search", "open", "alarms", "--skills-dir", str(skills), "--json", data_dir=tmp_path)
    assert json.loads(done.stdout)["query"] == "open alarms"


def test_new_scaffolds_a_folder_that_validates(tmp_path: Path) -> None:
    skills = tmp_path / "skills"
    done = run("new", "ticket-triage", "--skills-dir", str(skills), data_dir=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (skills / "ticket-triage" / "SKILL.md").is_file()
    check = run("validate", str(skills), "--json", data_dir=tmp_path)
    assert check.returncode == 0
    assert json.loads(check.stdout)["loaded"] == ["ticket-triage"]
    again = run("new", "ticket-triage", "--skills-dir", str(skills), data_dir=tmp_path)
    assert again.returncode == 2
    assert "already exists" in again.stderr
