"""The skills and workflows browser: search with the router's scores, a skill's definition, a
workflow's graph drawn from its Mermaid description, and what failed to load."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.e2e.conftest import ROOT, screenshot


@pytest.fixture
def content(tmp_path: Path) -> tuple[Path, Path]:
    """The bundled skills and workflows, plus a broken skill and a broken workflow."""
    skills, workflows = tmp_path / "skills", tmp_path / "workflows"
    shutil.copytree(ROOT / "skills", skills)
    shutil.copytree(ROOT / "workflows", workflows)
    (skills / "half-done").mkdir()
    (skills / "half-done" / "SKILL.md").write_text("---\nname: half-done\n---\nNo description.\n")
    (workflows / "typo.yaml").write_text(
        "name: typo\nversion: 1\ndescription: x\nnodes:\n  - {id: a, kind: teleport}\n"
    )
    return skills, workflows


def test_skills_are_searched_with_scores_read_and_workflows_drawn(page: Any) -> None:
    page.goto("/#browser")
    page.get_by_role("searchbox", name="Search skills").fill("how many bearings are in stock")
    page.keyboard.press("Enter")
    rows = page.locator("#search-results tbody tr")
    expect(rows.first).to_contain_text("inventory")
    score = float(rows.first.locator("td").first.inner_text())
    assert 0 < score <= 1

    errors = page.locator("#skill-errors")
    expect(errors).to_contain_text("half-done/SKILL.md")
    expect(errors).to_contain_text("description")
    expect(page.locator("#workflow-errors")).to_contain_text("typo.yaml")

    rows.first.get_by_role("button", name="inventory").click()
    detail = page.locator("#detail")
    expect(detail.locator("h3")).to_have_text("Skill: inventory")
    expect(detail.locator("h3")).to_be_focused()
    expect(detail).to_contain_text("Instructions")
    expect(detail.locator("details summary").first).to_be_visible()

    page.locator("#workflow-list").get_by_role("button", name="refund-request").click()
    expect(detail.locator("h3")).to_contain_text("Workflow: refund-request")
    # Mermaid drew the graph: an SVG with a node per step of the workflow.
    graph = detail.locator(".graph svg")
    expect(graph).to_be_visible()
    nodes = page.request.get("/v1/workflows/refund-request").json()["nodes"]
    expect(graph.locator("g.node")).to_have_count(len(nodes))
    expect(graph).to_contain_text("Agent approval")
    screenshot(page, "skills-browser")


def test_a_search_that_matches_no_skill_says_so(page: Any) -> None:
    page.goto("/#browser")
    search = page.get_by_role("searchbox", name="Search skills")
    search.fill("how many bearings are in stock")
    search.press("Enter")
    expect(page.locator("#search-results tbody tr").first).to_contain_text("inventory")
    search.fill("zzzz qqqq")
    search.press("Enter")
    expect(page.locator("#search-status")).to_have_text("No skill matches “zzzz qqqq”.")
    expect(page.locator("#search-results")).to_be_hidden()  # no empty table with its headers
    search.fill("how many bearings are in stock")
    search.press("Enter")
    expect(page.locator("#search-results tbody tr").first).to_contain_text("inventory")
    expect(page.locator("#search-status")).to_be_empty()
