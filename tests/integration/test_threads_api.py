"""Native runs over HTTP: every decision of a turn as a typed SSE event; thread history."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from tests.fakellm import FakeLLM, Reply, ToolCall
from tests.skillkit import copy_fixture_skill


@pytest.fixture
def client(model_settings: Any, tmp_path: Path) -> Iterator[TestClient]:
    skills = tmp_path / "skills"
    copy_fixture_skill(skills, "storefront/order-lookup")
    settings = model_settings.model_copy(update={"skills_dir": skills, "skills_embeddings": True})
    with TestClient(create_app(settings)) as test_client:
        yield test_client


def events_of(text: str) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for block in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines())
        out.append((lines["event"], json.loads(lines["data"])))
    return out


def test_a_run_streams_its_route_tools_tokens_and_end(
    client: TestClient, fake_llm: FakeLLM
) -> None:
    fake_llm.script(
        Reply(tool_calls=[ToolCall("get_order", {"order_id": "ORD1001"})]),
        Reply(content="ORD1001 has shipped with DHL."),
    )
    response = client.post(
        "/v1/threads/t-1/runs/stream", json={"message": "where is my order ORD1001?"}
    )
    assert response.status_code == 200
    events = events_of(response.text)
    names = [name for name, _ in events]
    assert names[0] == "node_started"
    route = next(data for name, data in events if name == "route_decided")
    assert (route["kind"], route["target"], route["by"]) == ("skill", "order-lookup", "retrieval")
    assert route["candidates"][0]["score"] > 0
    assert route["reason"].startswith("score ")  # "score 0.71, margin 0.30"
    called = next(data for name, data in events if name == "tool_called")
    assert called["tool"] == "get_order"
    assert called["arguments"] == {"order_id": "ORD1001"}
    returned = next(data for name, data in events if name == "tool_returned")
    assert returned["ok"] is True
    assert "shipped" in returned["content"]
    tokens = "".join(data["text"] for name, data in events if name == "token")
    assert tokens == "ORD1001 has shipped with DHL."
    assert names[-1] == "run_finished"
    assert events[-1][1]["answer"] == "ORD1001 has shipped with DHL."
    assert names.index("route_decided") < names.index("tool_called") < names.index("token")


def test_thread_history_keeps_who_said_what(client: TestClient, fake_llm: FakeLLM) -> None:
    fake_llm.script(
        Reply(tool_calls=[ToolCall("get_order", {"order_id": "ORD1001"})]),
        Reply(content="Shipped."),
    )
    client.post("/v1/threads/t-2/runs/stream", json={"message": "where is my order ORD1001?"})
    thread = client.get("/v1/threads/t-2").json()
    assert [(m["index"], m["role"]) for m in thread["messages"]] == [
        (0, "human"),
        (1, "ai"),
        (2, "tool"),
        (3, "ai"),
    ]
    assert thread["messages"][1]["tool_calls"][0]["name"] == "get_order"
    assert thread["messages"][2]["tool_call_id"] == thread["messages"][1]["tool_calls"][0]["id"]
    assert thread["route"]["target"] == "order-lookup"
    assert thread["usage"]["model_calls"] == 2


def test_a_call_whose_arguments_are_not_json_is_listed_before_its_result(
    client: TestClient, fake_llm: FakeLLM
) -> None:
    # QA: the thread showed the refused call's result but not the call.
    fake_llm.script(
        Reply(
            tool_calls=[
                ToolCall("get_order", {"order_id": "ORD1001"}),
                ToolCall("get_order", '{"order_id": '),
            ]
        ),
        Reply(content="One of them shipped."),
    )
    client.post("/v1/threads/t-bad/runs/stream", json={"message": "where is my order ORD1001?"})
    messages = client.get("/v1/threads/t-bad").json()["messages"]
    calls = messages[1]["tool_calls"]
    assert [(c["name"], c["arguments"], c.get("unreadable_arguments")) for c in calls] == [
        ("get_order", {"order_id": "ORD1001"}, None),
        ("get_order", {}, '{"order_id": '),
    ]
    results = [m["tool_call_id"] for m in messages if m["role"] == "tool"]
    assert sorted(results) == sorted(c["id"] for c in calls)


def test_a_failed_run_ends_with_run_failed(client: TestClient, fake_llm: FakeLLM) -> None:
    fake_llm.script(*[Reply(status=500)] * 3)
    response = client.post(
        "/v1/threads/t-3/runs/stream", json={"message": "where is my order ORD1001?"}
    )
    name, data = events_of(response.text)[-1]
    assert name == "run_failed"
    assert data["code"] == "model_unavailable"


def test_bad_thread_ids_and_unknown_threads(client: TestClient) -> None:
    assert client.get("/v1/threads/nope-never").status_code == 404
    bad = client.post("/v1/threads/..%2Fetc/runs/stream", json={"message": "hi"})
    assert bad.status_code in (400, 404)
    for blank in ("", "  \n "):
        empty = client.post("/v1/threads/t-4/runs/stream", json={"message": blank})
        assert empty.status_code == 400
        assert empty.json()["error"]["param"] == "message"
        assert "the message is empty" in empty.json()["error"]["message"]
    assert client.get("/v1/threads/t-4").status_code == 404  # nothing was stored


def test_routing_is_visible_without_a_model(make_settings: Any, tmp_path: Path) -> None:
    skills = tmp_path / "skills"
    copy_fixture_skill(skills, "storefront/order-lookup")
    settings = make_settings(skills_dir=skills, skills_embeddings=True)
    with TestClient(create_app(settings)) as no_model:
        response = no_model.post(
            "/v1/threads/t-5/runs/stream", json={"message": "where is my order ORD1001?"}
        )
    events = events_of(response.text)
    route = next(data for name, data in events if name == "route_decided")
    assert (route["kind"], route["target"]) == ("skill", "order-lookup")
    assert "SKILLDESK_MODEL" in events[-1][1]["answer"]


@pytest.mark.parametrize(
    "title", ["two\nlines", "nul \x00 byte", "tab\there", "bell \x07", "c1 \x85", "ls \u2028 x"]
)
def test_a_title_with_a_control_character_is_refused_naming_the_field(
    client: TestClient, title: str
) -> None:
    # QA: accepted, then `skilldesk threads list` printed one thread across two lines.
    thread_id = client.post("/v1/threads", json={}).json()["thread_id"]
    for response in (
        client.patch(f"/v1/threads/{thread_id}", json={"title": title}),
        client.post("/v1/threads", json={"title": title}),
    ):
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["param"] == "title"
        assert "no line breaks, tabs or other control characters" in error["message"]
    assert client.get(f"/v1/threads/{thread_id}").json()["title"] == "New conversation"
    renamed = client.patch(f"/v1/threads/{thread_id}", json={"title": "Ünïcode — 订单 ✓"})
    assert renamed.json()["title"] == "Ünïcode — 订单 ✓"


@pytest.mark.parametrize(
    "listing", ["/v1/threads", "/v1/approvals", "/v1/workflow-runs", "/v1/admin/keys"]
)
def test_a_cursor_the_service_did_not_give_is_refused_saying_where_cursors_come_from(
    client: TestClient, listing: str
) -> None:
    # QA: the answer quoted the cursor's regular expression, which tells a client nothing.
    refused = client.get(listing, params={"cursor": "garbage"})
    assert refused.status_code == 400, refused.text
    error = refused.json()["error"]
    assert (error["code"], error["param"]) == ("invalid_request", "cursor")
    assert error["message"] == (
        "The cursor 'garbage' is not one this service gave: send the `next_cursor` of the "
        "previous page as it came (URL-encoded), or no cursor for the first page."
    )
    assert client.get(listing).status_code == 200  # no cursor: the first page
