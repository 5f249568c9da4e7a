"""What each surface says when a call cannot be made as asked: a workflow that is not there
or does not serve, a tool of a skill that did not load, arguments against the schema. Chat,
the workflow routes, the OpenAI-style tools and MCP say it with the same codes and messages."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from tests.integration.openapi.kit import LOOKUP
from tests.skillkit import copy_fixture_skill, tool, write_skill

BROKEN_WORKFLOW = "name: broken\ndescription: Never loads.\nnodes: {not: a list}\n"
TICKETS = "def get_ticket(ticket_id):\n    return {'ticket_id': ticket_id.strip()}\n"
TICKET_ID = {"type": "string", "pattern": "^\\s*T[0-9]+\\s*$"}  # as skill.yaml writes it
MCP_HEADERS = {"Accept": "application/json, text/event-stream"}


@pytest.fixture
def client(model_settings: Any, tmp_path: Path) -> Iterator[TestClient]:
    """The app with a good workflow (lookup), one whose file does not load (broken), a skill
    whose folder does not load (broken-desk, declaring open_desk_ticket), and a tool whose
    parameter has a pattern with backslashes (get_ticket)."""
    skills, workflows = tmp_path / "skills", tmp_path / "workflows"
    copy_fixture_skill(skills, "storefront/order-lookup")
    write_skill(
        skills,
        "ticket-desk",
        "Looks tickets up. Use it for a ticket's status.",
        config={
            "isolation": "thread",
            "tools": [tool("get_ticket", "handler:get_ticket", {"ticket_id": TICKET_ID})],
        },
        handler=TICKETS,
    )
    write_skill(
        skills,
        "broken-desk",
        "Opens desk tickets. Use it to open one.",
        config={"tools": [tool("open_desk_ticket", "handler:no_such_function")]},
        handler=TICKETS,
    )
    workflows.mkdir()
    (workflows / "lookup.yaml").write_text(LOOKUP)
    (workflows / "broken.yaml").write_text(BROKEN_WORKFLOW)
    settings = model_settings.model_copy(update={"skills_dir": skills, "workflows_dir": workflows})
    # Bound to loopback, /mcp answers only requests naming a loopback host.
    with TestClient(create_app(settings), base_url="http://127.0.0.1:8000") as test_client:
        yield test_client


def mcp_call(client: TestClient, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """A ``tools/call`` over the app's /mcp (no session): the JSON-RPC answer."""
    request = {"jsonrpc": "2.0", "id": 1, "method": "tools/call"}
    request["params"] = {"name": name, "arguments": arguments}
    response = client.post("/mcp", json=request, headers=MCP_HEADERS)
    assert response.status_code == 200, response.text
    if response.headers["content-type"].startswith("text/event-stream"):
        data = [line[5:] for line in response.text.splitlines() if line.startswith("data:")]
        answer: dict[str, Any] = json.loads(data[-1])
        return answer
    return dict(response.json())


def said(error: dict[str, Any]) -> dict[str, Any]:
    """An HTTP tool error's code and message (it has ``run_id`` and ``status`` too, null)."""
    return {"code": error["code"], "message": error["message"]}


def invoke(client: TestClient, name: str, arguments: dict[str, Any]) -> Any:
    return client.post(f"/v1/tools/{name}/invoke", json={"arguments": arguments})


# Workflows: "no such workflow" and "there is one, but it does not serve", on every surface.


def test_a_workflow_whose_file_did_not_load_is_workflow_unavailable_everywhere(
    client: TestClient,
) -> None:
    # QA: chat said 400 `workflow_unavailable`, POST /v1/workflows/broken/runs 404
    # `workflow_not_found`, MCP `invalid_arguments ... 'broken' is not one of [...]`.
    chat = client.post(
        "/v1/chat/completions",
        json={"workflow": "broken", "messages": [{"role": "user", "content": "hi"}]},
    )
    assert chat.status_code == 400, chat.text
    assert chat.json()["error"]["code"] == "workflow_unavailable"
    for path in ("/v1/workflows/broken/runs", "/v1/workflows/broken"):
        if path.endswith("runs"):
            answer = client.post(path, json={"inputs": {}})
        else:
            answer = client.get(path)
        assert answer.status_code == 404, answer.text
        error = answer.json()["error"]
        assert (error["code"], error["param"]) == ("workflow_unavailable", "name")
        assert error["message"].startswith("workflow 'broken' is not available: its file did")
    over_http = invoke(client, "run_workflow", {"workflow": "broken"}).json()
    assert over_http["ok"] is False
    assert over_http["error"]["code"] == "workflow_unavailable"
    assert "its file did not load" in over_http["error"]["message"]
    over_mcp = mcp_call(client, "run_workflow", {"workflow": "broken"})["result"]
    assert over_mcp["isError"] is True
    assert over_mcp["structuredContent"]["error"] == said(over_http["error"])


def test_an_unknown_workflow_is_unknown_workflow_everywhere_naming_the_installed_ones(
    client: TestClient,
) -> None:
    chat = client.post(
        "/v1/chat/completions",
        json={"workflow": "lookpu", "messages": [{"role": "user", "content": "hi"}]},
    )
    assert chat.status_code == 400, chat.text
    assert chat.json()["error"]["code"] == "unknown_workflow"
    started = client.post("/v1/workflows/lookpu/runs", json={"inputs": {}})
    read = client.get("/v1/workflows/lookpu")
    for answer in (started, read):
        assert answer.status_code == 404, answer.text
        error = answer.json()["error"]
        assert error["code"] == "unknown_workflow"
        assert "did you mean 'lookup'?" in error["message"]
        assert "(installed: lookup)" in error["message"]
    over_http = invoke(client, "run_workflow", {"workflow": "lookpu"}).json()
    assert over_http["error"]["code"] == "unknown_workflow"
    assert over_http["error"]["message"] == read.json()["error"]["message"]
    over_mcp = mcp_call(client, "run_workflow", {"workflow": "lookpu"})["result"]
    assert over_mcp["structuredContent"]["error"] == said(over_http["error"])


def test_the_openapi_document_names_both_workflow_codes(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    for path, method in (("/v1/workflows/{name}/runs", "post"), ("/v1/workflows/{name}", "get")):
        said = paths[path][method]["responses"]["404"]["description"]
        assert "`unknown_workflow`" in said
        assert "`workflow_unavailable`" in said
        assert "workflow_not_found" not in said


# A tool of a skill that did not load.


def test_calling_a_tool_of_a_skill_that_did_not_load_names_the_skill_and_its_error(
    client: TestClient,
) -> None:
    # QA: `404 no tool named 'open_desk_ticket'`, while load_skill said why the skill failed.
    reason = client.get("/v1/skills/broken-desk").json()["error"]["message"]
    assert "no_such_function" in reason
    answer = invoke(client, "open_desk_ticket", {})
    assert answer.status_code == 404, answer.text
    error = answer.json()["error"]
    assert error["code"] == "tool_not_found"
    message = error["message"]
    assert message.startswith("tool 'open_desk_ticket' is not available: it belongs to skill ")
    assert "'broken-desk'" in message
    assert "no_such_function" in message
    refused = mcp_call(client, "open_desk_ticket", {})
    assert refused["error"]["message"] == message
    # A name nobody declares is still "no tool", suggesting close ones.
    unknown = invoke(client, "get_tickets", {}).json()["error"]["message"]
    assert unknown == "no tool named 'get_tickets'; did you mean 'get_ticket'?"


# Arguments against the schema: the same message on both surfaces, the pattern as written.


def test_a_failed_call_has_the_same_message_over_http_and_mcp_the_pattern_as_written(
    client: TestClient,
) -> None:
    # QA: HTTP said `error (invalid_arguments): invalid arguments for ...` (the code twice),
    # MCP without the prefix; and the pattern came with its backslashes doubled.
    over_http = invoke(client, "get_ticket", {"ticket_id": "X1"}).json()
    over_mcp = mcp_call(client, "get_ticket", {"ticket_id": "X1"})["result"]
    error = over_http["error"]
    assert said(error) == over_mcp["structuredContent"]["error"]
    assert error["code"] == "invalid_arguments"
    assert error["message"] == (
        "invalid arguments for get_ticket: ticket_id: 'X1' does not match '^\\s*T[0-9]+\\s*$'"
    )
    assert over_http["content"] == f"error (invalid_arguments): {error['message']}"
