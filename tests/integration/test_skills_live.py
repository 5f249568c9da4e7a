"""Skills through the service: live reload, HTTP surface, tools inside a conversation."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from tests.fakellm import FakeLLM, Reply, ToolCall
from tests.skillkit import copy_fixture_skill, copy_fixture_skills, tool, write_skill


@pytest.fixture
def skills_dir(tmp_path: Path) -> Path:
    return copy_fixture_skills(tmp_path / "skills", "storefront")  # orders and weather


@pytest.fixture
def client(model_settings: Any, skills_dir: Path) -> Iterator[TestClient]:
    # Learning from use off: a skill the model loads would be learned and then pre-loaded
    # for the next message, and these tests watch the loading itself.
    settings = model_settings.model_copy(
        update={
            "skills_dir": skills_dir,
            "skills_watch": True,
            "skills_embeddings": True,
            "learn_examples": False,
        }
    )
    with TestClient(create_app(settings)) as test_client:
        yield test_client


def wait_for(predicate: Any, timeout: float = 2.0) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if predicate():
            return time.monotonic() - started
        time.sleep(0.05)
    raise AssertionError(f"not within {timeout} s")


def assert_order_answered(client: TestClient) -> None:
    """The order lookup's tool answers, through the service, with the order."""
    called = client.post(
        "/v1/skills/order-lookup/tools/get_order", json={"arguments": {"order_id": "ORD1001"}}
    )
    assert called.json()["ok"] is True, called.text
    assert "ORD1001" in json.dumps(called.json()["result"])


def names(client: TestClient) -> list[str]:
    return [s["name"] for s in client.get("/v1/skills").json()["skills"]]


def test_a_folder_copied_in_is_searchable_and_callable_within_two_seconds(
    client: TestClient, skills_dir: Path, tmp_path: Path
) -> None:
    source = copy_fixture_skill(tmp_path / "elsewhere", "storefront/order-lookup", "parcel-tracker")
    config = (source / "skill.yaml").read_text().replace("get_order", "track_parcel")
    (source / "skill.yaml").write_text(config)
    handler = (source / "handler.py").read_text().replace("get_order", "track_parcel")
    (source / "handler.py").write_text(handler)
    time.sleep(0.3)  # let the watcher settle on the initial tree
    shutil.copytree(source, skills_dir / "parcel-tracker")
    started = time.monotonic()

    def searchable() -> bool:
        hits = client.get("/v1/skills/search", params={"q": "parcel tracker", "k": 3}).json()
        return "parcel-tracker" in [h["name"] for h in hits["results"]]

    wait_for(searchable, timeout=2.0)
    call = client.post(
        "/v1/skills/parcel-tracker/tools/track_parcel", json={"arguments": {"order_id": "ORD1001"}}
    )
    assert time.monotonic() - started < 2.0
    assert call.json()["ok"] is True
    assert call.json()["result"] == {"order_id": "ORD1001", "status": "shipped", "carrier": "DHL"}


def test_a_skill_folder_linked_in_is_reloaded_when_its_files_change(
    client: TestClient, skills_dir: Path, tmp_path: Path
) -> None:
    # QA: a skill developed elsewhere and linked into the skills folder kept its old
    # definition after edits: the watcher saw the link, not the folder it leads to.
    source = copy_fixture_skill(tmp_path / "dev", "storefront/order-lookup", "parcel-tracker")
    for name in ("skill.yaml", "handler.py"):
        text = (source / name).read_text().replace("get_order", "track_parcel")
        (source / name).write_text(text)
    time.sleep(0.3)  # let the watcher settle on the initial tree
    (skills_dir / "parcel-tracker").symlink_to(source, target_is_directory=True)
    wait_for(lambda: "parcel-tracker" in names(client))

    def described() -> str:
        return str(client.get("/v1/skills/parcel-tracker").json()["description"])

    def edited() -> bool:  # written again until seen: the watcher takes the new link in
        body = "---\nname: parcel-tracker\ndescription: Tracks parcels, edited.\n---\n\nIt.\n"
        (source / "SKILL.md").write_text(body)
        time.sleep(0.2)
        return described() == "Tracks parcels, edited."

    assert described() != "Tracks parcels, edited."
    wait_for(edited, timeout=4.0)


def test_a_broken_edit_keeps_serving_the_last_good_version(
    client: TestClient, skills_dir: Path
) -> None:
    time.sleep(0.3)
    (skills_dir / "order-lookup" / "skill.yaml").write_text("tools: [unclosed\n")

    def reported() -> bool:
        return any(e["skill"] == "order-lookup" for e in client.get("/v1/skills").json()["errors"])

    wait_for(reported)
    error = next(
        e for e in client.get("/v1/skills").json()["errors"] if e["skill"] == "order-lookup"
    )
    assert error["file"] == "skill.yaml"
    assert "line" in error["message"]
    assert "order-lookup" in names(client)
    assert_order_answered(client)


def test_a_broken_handler_edit_keeps_the_last_good_code_answering(
    client: TestClient, skills_dir: Path
) -> None:
    # The skill stayed listed, but its worker imported the file on disk, broken: every call
    # failed with handler_import_failed (QA), at once or once its worker restarted.
    time.sleep(0.3)
    handler = skills_dir / "order-lookup" / "handler.py"
    handler.write_text(handler.read_text().replace("def get_order(", "def get_order(:"))

    def reported() -> bool:
        errors = client.get("/v1/skills").json()["errors"]
        return any(e["skill"] == "order-lookup" and "parse" in e["message"] for e in errors)

    wait_for(reported, timeout=4.0)
    assert_order_answered(client)


def test_a_tool_schema_that_cannot_check_arguments_is_refused_by_place_not_served_as_500(
    client: TestClient, skills_dir: Path
) -> None:
    time.sleep(0.3)
    config = skills_dir / "order-lookup" / "skill.yaml"
    config.write_text(config.read_text().replace("'^ORD[0-9]+$'", "'^ORD([0-9]+$'"))
    bad_schema = {
        "type": "object",
        "properties": {
            "b": {"type": "string", "pattern": "([unclosed"},
            "c": {"$ref": "#/nope"},
        },
    }
    write_skill(
        skills_dir,
        "badschema",
        "Checks badly. Use it to test schemas.",
        config={"tools": [tool("bs_tool", "handler:bs_tool") | {"parameters": bad_schema}]},
        handler="def bs_tool(**values):\n    return values\n",
    )

    def errors() -> list[dict[str, Any]]:
        return list(client.get("/v1/skills").json()["errors"])

    wait_for(lambda: {e["skill"] for e in errors()} == {"order-lookup", "badschema"})
    fields = {(e["skill"], e["file"], e["field"]): e["message"] for e in errors()}
    where = "tools[0] (get_order).parameters.properties.order_id.pattern"
    assert fields[("order-lookup", "skill.yaml", where)].startswith("'^ORD([0-9]+$' does not")
    refused = fields[
        ("badschema", "skill.yaml", "tools[0] (bs_tool).parameters.properties.b.pattern")
    ]
    assert "unterminated character set at position 1" in refused
    ref = fields[("badschema", "skill.yaml", "tools[0] (bs_tool).parameters.properties.c.$ref")]
    assert ref.startswith("'#/nope' does not resolve")
    # The edit is refused: the last good version of order-lookup serves, badschema is not in.
    assert "badschema" not in names(client)
    ok = client.post(
        "/v1/skills/order-lookup/tools/get_order", json={"arguments": {"order_id": "ORD1001"}}
    )
    assert ok.json()["ok"] is True
    for path in ("/v1/skills/badschema/tools/bs_tool", "/v1/tools/bs_tool/invoke"):
        missing = client.post(path, json={"arguments": {"b": "x"}})
        assert missing.status_code == 404, path


def test_a_removed_folder_disappears(client: TestClient, skills_dir: Path) -> None:
    time.sleep(0.3)
    shutil.rmtree(skills_dir / "weather-report")
    wait_for(lambda: "weather-report" not in names(client))
    assert client.get("/v1/skills/weather-report").status_code == 404


def test_skill_definition_and_search_over_http(client: TestClient) -> None:
    definition = client.get("/v1/skills/order-lookup").json()
    assert "Never reveal internal margins." in definition["instructions"]
    assert definition["tools"][0]["function"]["name"] == "get_order"
    assert definition["references"] == ["references/shipping.md"]
    found = client.get("/v1/skills/search", params={"q": "我的订单到哪了"}).json()
    assert found["results"][0]["name"] == "order-lookup"
    missing = client.get("/v1/skills/order-lokup")
    assert missing.status_code == 404
    assert "did you mean 'order-lookup'" in missing.json()["error"]["message"]


def test_direct_tool_call_errors_are_readable(client: TestClient) -> None:
    bad = client.post(
        "/v1/skills/order-lookup/tools/get_order", json={"arguments": {"order_id": "nope"}}
    ).json()
    assert bad["ok"] is False
    assert bad["error"]["code"] == "invalid_arguments"
    failed = client.post(
        "/v1/skills/order-lookup/tools/get_order", json={"arguments": {"order_id": "ORD9"}}
    ).json()
    assert failed["error"]["code"] == "tool_failed"
    assert "no order ORD9" in failed["error"]["message"]
    wrong = client.post("/v1/skills/weather-report/tools/get_order", json={"arguments": {}})
    assert (wrong.status_code, wrong.json()["error"]["code"]) == (404, "tool_not_found")
    unwrapped = client.post("/v1/skills/order-lookup/tools/get_order", json={"order_id": "ORD1"})
    assert unwrapped.status_code == 400
    assert unwrapped.json()["error"]["param"] == "order_id"


def chat(client: TestClient, text: str, thread: str) -> dict[str, Any]:
    response = client.post(
        "/v1/chat/completions",
        headers={"X-Thread-Id": thread},
        json={"messages": [{"role": "user", "content": text}]},
    )
    assert response.status_code == 200, response.text
    return dict(response.json())


def tool_names(request: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in request.get("tools", [])]


def test_confident_route_injects_the_definition_and_answers_in_two_model_calls(
    client: TestClient, fake_llm: FakeLLM
) -> None:
    fake_llm.script(
        Reply(tool_calls=[ToolCall("get_order", {"order_id": "ORD1001"})]),
        Reply(content="ORD1001 has shipped with DHL."),
    )
    answer = chat(client, "where is my order ORD1001? has my parcel shipped", "t-inject")
    assert answer["choices"][0]["message"]["content"] == "ORD1001 has shipped with DHL."
    first, second = fake_llm.scripted_requests
    assert fake_llm.forced_requests == []  # retrieval was confident: no routing model call
    assert "get_order" in tool_names(first)
    assert "Never reveal internal margins." in first["messages"][0]["content"]
    result = [m for m in second["messages"] if m["role"] == "tool"][-1]
    assert json.loads(result["content"]) == {
        "order_id": "ORD1001",
        "status": "shipped",
        "carrier": "DHL",
    }
    assert "internal_margin" not in json.dumps(second)


def test_model_loads_a_skill_itself_and_the_definition_enters_once(
    client: TestClient, fake_llm: FakeLLM
) -> None:
    fake_llm.script(
        Reply(tool_calls=[ToolCall("load_skill", {"name": "weather-report"})]),
        Reply(content="It will rain."),
        Reply(tool_calls=[ToolCall("load_skill", {"name": "weather-report"})]),
        Reply(content="Still rain."),
    )
    chat(client, "hmm, is it going to be wet outside later", "t-load")
    chat(client, "and tomorrow?", "t-load")
    last = fake_llm.scripted_requests[-1]["messages"]
    definitions = [
        m for m in last if m["role"] == "tool" and "# Skill: weather-report" in (m["content"] or "")
    ]
    assert len(definitions) == 1
    assert any("already loaded" in (m["content"] or "") for m in last if m["role"] == "tool")


def test_a_tool_of_a_skill_not_loaded_is_refused_and_not_imported(
    client: TestClient, fake_llm: FakeLLM
) -> None:
    fake_llm.script(
        Reply(tool_calls=[ToolCall("get_order", {"order_id": "ORD1001"})]), Reply(content="Sorry.")
    )
    chat(client, "tell me about the weather forecast and rain", "t-refuse")
    refusal = [m for m in fake_llm.scripted_requests[1]["messages"] if m["role"] == "tool"][-1]
    assert refusal["content"].startswith(("error (out_of_scope)", "error (skill_not_loaded)"))
    assert "shipped" not in refusal["content"]


def test_malformed_tool_arguments_get_an_error_result_and_the_turn_continues(
    client: TestClient, fake_llm: FakeLLM
) -> None:
    fake_llm.script(
        Reply(tool_calls=[ToolCall("load_skill", '{"name": ')]),
        Reply(content="Let me try that again later."),
    )
    answer = chat(client, "something odd", "t-malformed")
    assert answer["choices"][0]["message"]["content"] == "Let me try that again later."
    second = fake_llm.scripted_requests[1]["messages"]
    calls = [c["id"] for m in second if m["role"] == "assistant" for c in m.get("tool_calls", [])]
    results = [m["tool_call_id"] for m in second if m["role"] == "tool"]
    assert calls == results
    assert "not valid JSON" in second[-1]["content"]


def test_the_tool_loop_stops_after_five_rounds(client: TestClient, fake_llm: FakeLLM) -> None:
    fake_llm.script(
        *[Reply(tool_calls=[ToolCall("load_skill", {"name": "weather-report"})]) for _ in range(5)]
    )
    answer = chat(client, "loop forever please", "t-loop")
    assert "stopped after 5 rounds" in answer["choices"][0]["message"]["content"]
    assert len(fake_llm.scripted_requests) == 5
