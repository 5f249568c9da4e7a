"""What the HTTP API answers when a workflow cannot run (QA): a missing input named as the
request's field, and a workflow withdrawn while a start was under way answered as one
withdrawn before, by the workflow routes and by chat alike."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.api.routes import workflows as routes
from app.main import create_app

ROOT = Path(__file__).parents[2]


@pytest.fixture
def client(model_settings: Any) -> Iterator[TestClient]:
    settings = model_settings.model_copy(
        update={"skills_dir": ROOT / "skills", "workflows_dir": ROOT / "workflows"}
    )
    with TestClient(create_app(settings)) as test_client:
        yield test_client


def test_a_missing_input_is_a_400_naming_it_and_its_field(client: TestClient) -> None:
    # QA: "'order_id' is required: string", param null.
    missing = client.post("/v1/workflows/refund-request/runs", json={"inputs": {}})
    assert missing.status_code == 400, missing.text
    error = missing.json()["error"]
    assert (error["code"], error["param"]) == ("invalid_inputs", "inputs.order_id")
    assert "input 'order_id' is required (a string" in error["message"]


def test_a_workflow_withdrawn_during_its_start_is_answered_as_one_withdrawn_before(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # QA: withdrawn between the route's look-up and engine.stream, the run was a 404
    # `workflow_not_found`; asked again, `workflow_unavailable`.
    registry = client.app.state.services.workflow_registry  # type: ignore[attr-defined]
    found = routes._workflow

    def found_then_withdrawn(services: Any, name: str) -> Any:
        workflow = found(services, name)
        registry.recheck(tools=set())  # every skill's tools gone, meanwhile
        return workflow

    monkeypatch.setattr(routes, "_workflow", found_then_withdrawn)
    body = {"inputs": {"order_id": "ORD1001"}}
    raced = client.post("/v1/workflows/refund-request/runs", json=body)
    monkeypatch.undo()
    after = client.post("/v1/workflows/refund-request/runs", json=body)
    assert raced.status_code == after.status_code == 404, raced.text
    error, later = raced.json()["error"], after.json()["error"]
    assert error["code"] == later["code"] == "workflow_unavailable"
    assert error["message"] == later["message"]
    # The message names the file and the node, as GET /v1/workflows lists the problem.
    [listed] = [
        p
        for p in client.get("/v1/workflows").json()["errors"]
        if p["file"].endswith("refund-request.yaml")
    ]
    # The file by its name in the workflows folder: not the server's path.
    file = Path(listed["file"]).name
    where = f"{file}:{listed['line']}: node {listed['node']!r}: {listed['message']}"
    assert error["message"] == f"workflow 'refund-request' is not available: {where}"
    # Chat says it in the same words.
    chat = client.post("/v1/threads/t-1/runs", json={"message": "hi", "workflow": "refund-request"})
    assert chat.status_code == 400, chat.text
    told = chat.json()["error"]
    assert (told["code"], told["param"]) == ("workflow_unavailable", "workflow")
    assert told["message"] == later["message"]
