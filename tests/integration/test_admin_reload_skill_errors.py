"""`POST /v1/admin/reload` answers every skill problem there is, as it does workflows'."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from app.main import create_app
from tests.skillkit import tool, write_skill


def test_an_admin_reload_lists_a_broken_edit_of_a_skill_still_serving_its_last_good_version(
    make_settings: Any, tmp_path: Path
) -> None:
    # QA: the answer said "skill_errors": [] when the problem had been found before this
    # reload (by the folder's watcher, or an earlier reload), while "workflow_errors" listed
    # every problem there was.
    skills = tmp_path / "skills"
    good = write_skill(
        skills,
        "order-query",
        config={"tools": [tool("get_order", "handler:get_order")]},
        handler="def get_order():\n    return {}\n",
    )
    write_skill(skills, "refused", frontmatter={"name": "another-name"})
    with TestClient(create_app(make_settings(skills_dir=skills))) as client:
        (good / "handler.py").write_text("def get_order(:\n", encoding="utf-8")  # broken edit
        answers = [client.post("/v1/admin/reload").json() for _ in range(2)]
    for answer in answers:
        assert answer["skills"] == ["order-query"], answer  # its last good version serves
        errors = {e.split(",")[0]: e for e in answer["skill_errors"]}
        assert sorted(errors) == ["skill 'order-query'", "skill 'refused'"], answer
        assert "handler.py does not parse" in errors["skill 'order-query'"]
