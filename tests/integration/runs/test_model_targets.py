"""A chat UI that speaks only the OpenAI protocol picks a skill or a workflow from its model
menu: `GET /v1/models` lists them, and `model` selects one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from app.main import create_app
from tests.fakellm import FakeLLM, Reply, ToolCall
from tests.integration.openapi.kit import LOOKUP
from tests.skillkit import copy_fixture_skill


def test_the_model_menu_lists_the_targets_and_a_skill_chosen_there_answers(
    model_settings: Any, tmp_path: Path, fake_llm: FakeLLM
) -> None:
    copy_fixture_skill(tmp_path / "skills", "storefront/order-lookup")
    (tmp_path / "workflows").mkdir()
    (tmp_path / "workflows" / "lookup.yaml").write_text(LOOKUP)
    settings = model_settings.model_copy(
        update={"skills_dir": tmp_path / "skills", "workflows_dir": tmp_path / "workflows"}
    )
    fake_llm.script(
        Reply(tool_calls=[ToolCall("get_order", {"order_id": "ORD1001"})]),
        Reply(content="It shipped with DHL."),
    )
    with TestClient(create_app(settings)) as client:
        menu = [m["id"] for m in client.get("/v1/models").json()["data"]]
        assert menu[:3] == [
            "skilldesk",
            "skilldesk/workflow/lookup",
            "skilldesk/skill/order-lookup",
        ]
        answer = client.post(
            "/v1/chat/completions",
            json={
                "model": "skilldesk/skill/order-lookup",
                "messages": [{"role": "user", "content": "hello there"}],
            },
            headers={"X-Thread-Id": "menu-1"},
        )
        assert answer.status_code == 200, answer.text
        assert answer.json()["choices"][0]["message"]["content"] == "It shipped with DHL."
        route = client.get("/v1/threads/menu-1").json()["route"]
        assert (route["kind"], route["target"]) == ("skill", "order-lookup")
        unknown = client.post(
            "/v1/chat/completions",
            json={"model": "skilldesk/skill/nope", "messages": [{"role": "user", "content": "x"}]},
        )
        assert unknown.status_code == 400
        assert unknown.json()["error"]["param"] == "model"


def test_a_workflow_withdrawn_for_a_missing_tool_is_refused_saying_why(
    model_settings: Any, tmp_path: Path
) -> None:
    # QA: asked for by name in chat it was "There is no workflow named ...", while the
    # workflow-runs API said why it was not available.
    (tmp_path / "skills").mkdir()
    (tmp_path / "workflows").mkdir()
    (tmp_path / "workflows" / "lookup.yaml").write_text(LOOKUP)  # needs get_order: not here
    settings = model_settings.model_copy(
        update={"skills_dir": tmp_path / "skills", "workflows_dir": tmp_path / "workflows"}
    )
    with TestClient(create_app(settings)) as client:
        asked = [
            client.post("/v1/threads/w-1/runs", json={"message": "hi", "workflow": "lookup"}),
            client.post(
                "/v1/chat/completions",
                json={
                    "model": "skilldesk/workflow/lookup",
                    "messages": [{"role": "user", "content": "hi"}],
                },
            ),
        ]
        unknown = client.post("/v1/threads/w-1/runs", json={"message": "hi", "workflow": "nope"})
    for refused in asked:
        assert refused.status_code == 400, refused.text
        error = refused.json()["error"]
        assert error["code"] == "workflow_unavailable"
        assert "workflow 'lookup' is not available" in error["message"]
        assert "get_order" in error["message"]
    assert unknown.json()["error"]["code"] == "unknown_workflow"


def test_a_run_naming_no_model_profile_is_refused_naming_the_profiles(
    model_settings: Any, fake_llm: FakeLLM
) -> None:
    # QA: `"model": "nope"` was answered by the default profile (202), while a misspelled
    # skill or workflow was a 400.
    user = [{"role": "user", "content": "hello there"}]
    with TestClient(create_app(model_settings)) as client:
        for path in ("/v1/threads/m-1/runs", "/v1/threads/m-1/runs/stream"):
            refused = client.post(path, json={"message": "hello there", "model": "nope"})
            assert refused.status_code == 400, refused.text
            error = refused.json()["error"]
            assert (error["code"], error["param"]) == ("unknown_model", "model")
            assert error["message"].startswith(
                "There is no model profile named 'nope' (the profiles: default); leave "
                "`model` out for the default profile, or name a target: skilldesk, "
            )
        assert client.get("/v1/threads/m-1").status_code == 404  # nothing was made
        fake_llm.script(Reply(content="Hi."), Reply(content="Hi again."), Reply(content="Hi."))
        named = {"message": "hello there", "model": "default"}
        assert client.post("/v1/threads/m-2/runs/stream", json=named).status_code == 200
        target = {"message": "hello there", "model": "skilldesk"}
        assert client.post("/v1/threads/m-2/runs/stream", json=target).status_code == 200
        # OpenAI clients send model names of their own: the default profile answers them.
        chat = client.post("/v1/chat/completions", json={"model": "gpt-4o", "messages": user})
        assert chat.status_code == 200, chat.text
