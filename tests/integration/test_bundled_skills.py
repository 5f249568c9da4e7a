"""The bundled skills served as a new user gets them: real folders, real handlers, real data."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import ROOT
from tests.bundledkit import work_orders
from tests.fakellm import FakeLLM, Reply, RequestView, ToolCall

BUNDLED = ROOT / "skills"


@pytest.fixture
def client(model_settings: Any) -> Iterator[TestClient]:
    settings = model_settings.model_copy(update={"skills_dir": BUNDLED, "skills_embeddings": True})
    with TestClient(create_app(settings)) as test_client:
        yield test_client


def test_every_bundled_skill_loads_without_problems(client: TestClient) -> None:
    listing = client.get("/v1/skills").json()
    assert listing["errors"] == []
    names = {s["name"] for s in listing["skills"]}
    folders = {p.name for p in BUNDLED.iterdir() if (p / "SKILL.md").is_file()}
    assert names == folders  # every shipped folder is served, nothing else
    assert any(s["instruction_only"] for s in listing["skills"])
    assert any(s["pinned"] for s in listing["skills"])


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("where is my order ORD1003", "order-query"),
        ("CNC-001 有告警吗", "device-alarms"),
        ("how many units of the spare bearing are left in stock", "inventory"),
        ("spindle temperature trend of CNC-001", "sensor-readings"),
        ("open a work order for PUMP-07, pressure is low", "work-order"),
        ("read this text out loud", "text-to-speech"),
        ("can I still return the blender I bought three weeks ago", "returns-policy"),
        ("procedure for hydraulic pump pressure loss", "maintenance-kb"),
    ],
)
def test_bundled_skills_are_found_by_what_users_say(
    client: TestClient, query: str, expected: str
) -> None:
    results = client.get("/v1/skills/search", params={"q": query, "k": 3}).json()["results"]
    assert results[0]["name"] == expected, results


def test_work_order_creation_is_idempotent_per_key(client: TestClient) -> None:
    args = {
        "device_id": "PUMP-07",
        "title": "Pressure low",
        "priority": "high",
        "description": "Outlet pressure below 125 bar since 08:00.",
    }
    url = "/v1/skills/work-order/tools/create_work_order"
    headers = {"Idempotency-Key": "retry-me-1"}
    first = client.post(url, json={"arguments": args}, headers=headers).json()
    again = client.post(url, json={"arguments": args}, headers=headers).json()
    assert first["ok"] is True, first
    # The retry gets the first call's response, recorded in the call journal: the handler
    # did not run again.
    assert again["result"] == first["result"]
    assert first["result"]["duplicate"] is False
    listed = client.post(
        "/v1/skills/work-order/tools/list_work_orders", json={"arguments": {"device_id": "PUMP-07"}}
    ).json()
    ids = [o["work_order_id"] for o in work_orders(listed["result"])]
    assert ids.count(first["result"]["work_order_id"]) == 1


def test_an_order_question_is_answered_from_the_shipped_data(
    client: TestClient, fake_llm: FakeLLM
) -> None:
    fake_llm.script(
        Reply(tool_calls=[ToolCall("get_order", {"order_id": "ORD1001"})]),
        Reply(content="Your order is on its way."),
    )
    response = client.post(
        "/v1/chat/completions",
        headers={"X-Thread-Id": "bundled-1"},
        json={"messages": [{"role": "user", "content": "where is my order ORD1001?"}]},
    )
    assert response.json()["choices"][0]["message"]["content"] == "Your order is on its way."
    assert len(fake_llm.scripted_requests) == 2  # confident route: no load_skill round trip
    result = [m for m in fake_llm.scripted_requests[1]["messages"] if m["role"] == "tool"][-1]
    order = json.loads(result["content"])
    shipped = json.loads((BUNDLED / "order-query" / "assets" / "orders.json").read_text())
    rows = shipped["orders"] if isinstance(shipped, dict) else shipped
    expected = next(o for o in rows if o["order_id"] == "ORD1001")
    assert order["order_id"] == "ORD1001"
    assert order["status"] == expected["status"]


def test_a_target_named_in_the_model_and_its_field_alike_is_taken(
    client: TestClient, fake_llm: FakeLLM
) -> None:
    # It was a 400 unknown_model ("names no target").
    fake_llm.script(Reply(content="On its way."))
    body = {
        "messages": [{"role": "user", "content": "where is ORD1001?"}],
        "model": "skilldesk/skill/order-query",
        "skill": "order-query",
    }
    response = client.post("/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text


def test_an_empty_answer_after_a_tool_ran_keeps_what_the_tool_did(
    client: TestClient, fake_llm: FakeLLM
) -> None:
    # The tool's call and result stay in the thread (the next turn's model must know what was
    # done), and the user is told the model wrote nothing from them; no model error.
    fake_llm.script(
        Reply(tool_calls=[ToolCall("get_order", {"order_id": "ORD1001"})]),
        Reply(content=""),
    )
    response = client.post(
        "/v1/chat/completions",
        headers={"X-Thread-Id": "bundled-empty"},
        json={"messages": [{"role": "user", "content": "where is my order ORD1001?"}]},
    )
    assert response.status_code == 200, response.text
    assert "wrote no answer" in response.json()["choices"][0]["message"]["content"]
    messages = client.get("/v1/threads/bundled-empty").json()["messages"]
    assert [m["role"] for m in messages] == ["human", "ai", "tool", "ai"]
    assert '"order_id": "ORD1001"' in messages[2]["content"]


def test_instruction_only_skill_with_references(client: TestClient, fake_llm: FakeLLM) -> None:
    fake_llm.script(
        Reply(tool_calls=[ToolCall("load_skill", {"name": "returns-policy"})]),
        Reply(
            tool_calls=[
                ToolCall(
                    "read_skill_reference", {"name": "returns-policy", "path": "return-policy.md"}
                )
            ]
        ),
        Reply(
            tool_calls=[
                ToolCall(
                    "read_skill_reference",
                    {"name": "returns-policy", "path": "../../../etc/passwd"},
                )
            ]
        ),
        Reply(content="You have 30 days."),
    )
    client.post(
        "/v1/chat/completions",
        headers={"X-Thread-Id": "bundled-2"},
        json={
            "messages": [
                {
                    "role": "user",
                    "content": "can I still return the blender I bought three weeks ago",
                }
            ]
        },
    )
    tools_in_first = [t["function"]["name"] for t in fake_llm.scripted_requests[0]["tools"]]
    assert "read_skill_reference" in tools_in_first
    reference = [m for m in fake_llm.scripted_requests[2]["messages"] if m["role"] == "tool"][-1]
    expected = (BUNDLED / "returns-policy" / "references" / "return-policy.md").read_text()
    assert reference["content"] == expected
    refused = [m for m in fake_llm.scripted_requests[3]["messages"] if m["role"] == "tool"][-1]
    assert "outside skill 'returns-policy'" in refused["content"]
    assert "root:" not in refused["content"]


def test_a_two_domain_question_is_one_expert_and_two_model_calls_over_http(
    client: TestClient, fake_llm: FakeLLM
) -> None:
    def answer(request: RequestView) -> Reply:
        results = [json.loads(m.text) for m in request.results]
        return Reply(content=f"{len(results)} results: " + json.dumps(results)[:200])

    fake_llm.script(
        Reply(
            tool_calls=[
                ToolCall("get_order", {"order_id": "ORD1001"}),
                ToolCall("list_alarms", {"device_id": "CNC-001"}),
            ]
        ),
        answer,
    )
    response = client.post(
        "/v1/threads/bundled-3/runs/stream",
        json={"message": "check order ORD1001 and tell me if CNC-001 has open alarms"},
    )
    events = [
        (block.split("\n")[0].removeprefix("event: "), block.split("data: ", 1)[1])
        for block in response.text.strip().split("\n\n")
    ]
    route = json.loads(next(data for name, data in events if name == "route_decided"))
    assert route["kind"] == "multi"
    assert set(route["skills"]) == {"order-query", "device-alarms"}
    started = [json.loads(data)["node"] for name, data in events if name == "node_started"]
    assert "joint_expert" in started
    assert "aggregate" not in started
    assert events[-1][0] == "run_finished"
    assert len(fake_llm.scripted_requests) == 2
    assert json.loads(events[-1][1])["answer"].startswith("2 results: ")
    thread = client.get("/v1/threads/bundled-3").json()
    tasks = thread["workspace"]["tasks"].values()
    assert {t["skill"]: t["status"] for t in tasks} == {
        "order-query": "done",
        "device-alarms": "done",
    }
