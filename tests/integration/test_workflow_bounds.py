"""The service with workflow files that once took it down (YAML aliases expanding without
end) and inputs of the wrong type, over HTTP: each refused by name, the rest serving."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from tests.workflowkit import alias_bomb

ROOT = Path(__file__).parents[2]
TYPED = """\
name: typed
description: Typed inputs.
inputs:
  n: {type: integer}
  x: {type: number, required: false, default: 1.5}
  s: {type: string, required: false, default: d}
nodes:
  - id: one
    kind: set
    values: {n: "{{ inputs.n + 1 }}", x: "{{ inputs.x * 2 }}", s: "{{ inputs.s | upper }}"}
outputs:
  message: "{{ nodes.one.output }}"
"""


@pytest.fixture
def client(model_settings: Any, tmp_path: Path) -> Iterator[TestClient]:
    folder = tmp_path / "workflows"
    shutil.copytree(ROOT / "workflows", folder)
    (folder / "typed.yaml").write_text(TYPED, encoding="utf-8")
    (folder / "anchor.yaml").write_text(
        "name: k-anchor\nversion: 1\ndescription: &a [*a]\nnodes: []\n", encoding="utf-8"
    )
    (folder / "laughs.yaml").write_text(
        "name: l-laughs\nnodes: []\n" + alias_bomb(), encoding="utf-8"
    )
    settings = model_settings.model_copy(
        update={"skills_dir": ROOT / "skills", "workflows_dir": folder}
    )
    with TestClient(create_app(settings)) as test_client:  # once "Application startup failed"
        yield test_client


def test_the_service_starts_and_lists_each_such_file_as_a_problem(client: TestClient) -> None:
    listed = client.get("/v1/workflows").json()
    assert {"refund-request", "typed"} <= {w["name"] for w in listed["workflows"]}
    found = {(Path(e["file"]).name, e["line"]): e["message"] for e in listed["errors"]}
    assert set(found) == {("anchor.yaml", 3), ("laughs.yaml", 8)}
    assert "an alias to &a is inside the node it names" in found["anchor.yaml", 3]
    assert found["laughs.yaml", 8].startswith("&l5 expands to more than 250,000 values")


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        ({"n": 1, "s": ["a", "b"]}, "inputs.s must be a string, not an array"),
        ({"n": 1, "s": {"a": 1}}, "inputs.s must be a string, not an object"),
        ({"n": 1, "x": "nan"}, "inputs.x must be a finite number, not 'nan'"),
        ({"n": 1, "x": True}, "inputs.x must be a number, not a boolean"),
        ({"n": "True"}, "inputs.n must be an integer, not 'True'"),
    ],
)
def test_an_input_of_another_type_is_a_400_naming_it(
    client: TestClient, inputs: dict[str, Any], message: str
) -> None:
    for body in ({"inputs": inputs}, {"inputs": inputs, "thread_id": "typed-t"}):
        refused = client.post("/v1/workflows/typed/runs", json=body)
        assert refused.status_code == 400, refused.text
        error = refused.json()["error"]
        assert error["code"] == "invalid_inputs"
        assert error["message"] == f"workflow 'typed' cannot start: {message}"
    assert client.get("/v1/threads/typed-t").status_code == 404


def test_numbers_written_as_text_still_start_a_run(client: TestClient) -> None:
    run = client.post("/v1/workflows/typed/runs", json={"inputs": {"n": "41", "x": "2"}})
    assert run.status_code == 200, run.text
    assert run.json()["inputs"] == {"n": 41, "x": 2, "s": "d"}
