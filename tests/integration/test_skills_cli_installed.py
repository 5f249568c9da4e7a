"""`skilldesk skills validate FOLDER` of one candidate skill kept outside the skills folder:
checked beside the installed skills, as the service would check it once dropped in."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from agents.owners import tool_owners
from app.main import create_app
from tests.skillkit import tool, write_skill

SKILLDESK = str(Path(sys.executable).with_name("skilldesk"))


def run(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SKILLDESK_")}
    clean.update(SKILLDESK_SKILLS_EMBEDDINGS="false", **env)
    return subprocess.run(
        [SKILLDESK, "skills", "validate", *args],
        env=clean,
        capture_output=True,
        text=True,
        timeout=120,
    )


def installed(root: Path) -> Path:
    write_skill(
        root,
        "order-query",
        "Look up orders by order number or status.",
        config={"tools": [tool("get_order", "handler:get_order")]},
        handler="def get_order():\n    return {}\n",
    )
    write_skill(root, "device-alarms", "List open alarms of shop-floor devices.")
    return root


def candidate(
    stage: Path, folder: str = "new-skill", name: str | None = None, **tools: str
) -> Path:
    """A skill in a staging folder, declaring the tools ``tools`` (name: handler function)."""
    return write_skill(
        stage,
        folder,
        "Does a new thing. Use when the user asks for it.",
        frontmatter={"name": name or folder},
        config={"tools": [tool(t, f"handler:{f}") for t, f in tools.items()]},
        handler="".join(f"def {f}():\n    return 1\n" for f in tools.values()) or None,
    )


def old(folder: Path) -> None:
    """Make ``folder`` look defined long ago: older than every installed skill."""
    for each in [folder, *folder.iterdir()]:
        os.utime(each, (0, 0))


def test_a_candidate_declaring_a_tool_an_installed_skill_owns_is_refused(tmp_path: Path) -> None:
    # QA: it said `ok` (only its staging folder's siblings were compared) while the service,
    # once it was dropped in, refused it.
    skills, data = installed(tmp_path / "skills"), tmp_path / "data"
    tool_owners(data).save({"get_order": "order-query"})  # as the service recorded it
    record = (data / "owners" / "tools.json").read_bytes()
    new = candidate(tmp_path / "stage", get_order="f")
    old(new)  # the record decides, not the age
    done = run(str(new), "--skills-dir", str(skills), "--data-dir", str(data), "--json")
    assert done.returncode == 1, done.stdout
    assert json.loads(done.stdout) == {
        "loaded": [],
        "errors": [
            {
                "skill": "new-skill",
                "file": "skill.yaml",
                "field": "tools (get_order)",
                "message": "tool name 'get_order' is already defined by skill 'order-query'; "
                "tool names are global — rename it",
            }
        ],
        "warnings": [],
    }
    assert f"checking new-skill as if in {skills}, beside the 2 skill(s)" in done.stderr
    assert (data / "owners" / "tools.json").read_bytes() == record  # read, never written
    alone = run(str(new), "--alone", "--skills-dir", str(skills), "--data-dir", str(data))
    assert alone.returncode == 0, alone.stdout
    assert alone.stdout.splitlines() == ["ok      new-skill", "1 loaded, 0 problem(s)"]


def test_the_configured_skills_and_data_folders_are_the_installed_ones(tmp_path: Path) -> None:
    skills, data = installed(tmp_path / "skills"), tmp_path / "data"
    data.mkdir()  # no record yet: a name nobody owns stays with the installed skill
    new = candidate(tmp_path / "stage", get_order="f", new_thing="g")
    old(new)  # even though the candidate's files are older: it is dropped in now
    env = {"SKILLDESK_SKILLS_DIR": str(skills), "SKILLDESK_DATA_DIR": str(data)}
    done = run(str(new), **env)
    assert done.returncode == 1, done.stdout
    assert done.stdout.splitlines() == [
        "error   skill 'new-skill', skill.yaml [tools (get_order)]: tool name 'get_order' is "
        "already defined by skill 'order-query'; tool names are global — rename it",
        "0 loaded, 1 problem(s)",
    ]
    fixed = candidate(tmp_path / "stage", new_thing="g")
    assert run(str(fixed), **env).returncode == 0
    # A new version of an installed skill takes its place: its own tool is no clash.
    update = candidate(tmp_path / "next", "order-query", get_order="get_order", more="more")
    done = run(str(update), "--json", **env)
    assert done.returncode == 0, done.stdout
    assert json.loads(done.stdout)["loaded"] == ["order-query"]
    assert "as the new version of the installed 'order-query'" in done.stderr
    # A folder the service skips is said to be one.
    aside = candidate(tmp_path / "stage", "_new-thing", "new-thing")
    done = run(str(aside), "--json", **env)
    assert done.returncode == 1
    assert "the service skips a folder" in json.loads(done.stdout)["errors"][0]["message"]


CANDIDATES = {
    "a tool an installed skill owns": ("new-skill", None, {"get_order": "f"}),
    "a tool in another case": ("new-skill", None, {"Get_Order": "f"}),
    "a skill's name in another case": ("Order-Query", "order-query", {"lookup": "f"}),
    "its name in another case than its folder": ("new-skill", "New-Skill", {}),
    "a new version declaring another's tool": ("device-alarms", None, {"get_order": "f"}),
}


@pytest.mark.parametrize("case", CANDIDATES)
def test_validate_reports_a_candidate_as_the_service_does_once_it_is_dropped_in(
    case: str, tmp_path: Path, make_settings: Any
) -> None:
    folder, name, tools = CANDIDATES[case]
    skills = installed(tmp_path / "skills")
    settings = make_settings(skills_dir=skills)
    with TestClient(create_app(settings)):
        pass  # the service's first start records the owners of the installed tools
    new = candidate(tmp_path / "stage", folder, name, **tools)
    done = run(
        str(new),
        "--json",
        "--strict",
        SKILLDESK_SKILLS_DIR=str(skills),
        SKILLDESK_DATA_DIR=str(settings.data_dir),
    )
    checked = json.loads(done.stdout)

    shutil.rmtree(skills / folder, ignore_errors=True)  # a new version replaces the old
    shutil.copytree(new, skills / folder)
    with TestClient(create_app(settings)) as client:
        listing = client.get("/v1/skills").json()
    served = [s["name"] for s in listing["skills"]]
    refused = [e for e in listing["errors"] if e["skill"] == folder]
    warned = [w for w in listing["warnings"] if w["skill"] == folder]
    assert checked["errors"] == [*refused, *warned], done.stderr
    assert checked["loaded"] == ([folder] if folder in served else [])
    assert done.returncode == (1 if refused or warned else 0)
