"""Every surface refuses text that is not valid Unicode the same way, before anything is
stored; a valid surrogate pair (an emoji written as two escapes) is ordinary text."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from tests.fakellm import FakeLLM, Reply
from tests.skillkit import copy_fixture_skill

LONE = '"x \\ud800 y"'  # as JSON spells it: the body is valid UTF-8, its text is not Unicode


@pytest.fixture
def client(model_settings: Any, tmp_path: Path) -> Iterator[TestClient]:
    copy_fixture_skill(tmp_path / "skills", "storefront/order-lookup")
    settings = model_settings.model_copy(update={"skills_dir": tmp_path / "skills"})
    with TestClient(create_app(settings)) as test_client:
        yield test_client


@pytest.mark.parametrize(
    ("url", "body", "param"),
    [
        (
            "/v1/chat/completions",
            '{"model": "skilldesk", "messages": [{"role": "user", "content": LONE}]}',
            "messages.0.content",
        ),
        ("/v1/threads/t-uni/runs/stream", '{"message": LONE}', "message"),
        (
            "/v1/skills/order-lookup/tools/get_order",
            '{"arguments": {"order_id": LONE}}',
            "arguments.order_id",
        ),
    ],
)
def test_a_lone_surrogate_is_refused_naming_where_and_nothing_is_stored(
    client: TestClient, url: str, body: str, param: str
) -> None:
    headers = {"content-type": "application/json", "x-thread-id": "t-uni"}
    for _ in range(2):  # a client retrying gets the same answer, and still nothing is stored
        response = client.post(url, content=body.replace("LONE", LONE).encode(), headers=headers)
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert (error["code"], error["param"]) == ("invalid_text", param)
        assert "surrogate" in error["message"]
    thread = client.get("/v1/threads/t-uni")
    assert thread.status_code == 404 or thread.json()["messages"] == []


def test_a_valid_surrogate_pair_reaches_the_model_as_one_character(
    client: TestClient, fake_llm: FakeLLM
) -> None:
    fake_llm.script(Reply(content="Nice emoji."))
    body = '{"model": "skilldesk", "messages": [{"role": "user", "content": "hi \\ud83d\\ude00"}]}'
    response = client.post(
        "/v1/chat/completions", content=body.encode(), headers={"content-type": "application/json"}
    )
    assert response.status_code == 200, response.text
    sent = fake_llm.scripted_requests[-1]["messages"][-1]["content"]
    assert sent == "hi \U0001f600"


@pytest.mark.parametrize("url", ["/v1/chat/completions", "/mcp"])
def test_a_body_nested_too_deeply_with_a_lone_surrogate_is_a_client_error(
    client: TestClient, url: str
) -> None:
    # The check for lone surrogates parsed the body first: nested deeper than Python's
    # recursion limit, it raised RecursionError, a 500 with a traceback.
    depth = 100_000
    body = '{"messages": ' + '{"a": ' * depth + LONE + "}" * depth + "}"
    headers = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
    response = client.post(url, content=body.encode(), headers=headers)
    assert response.status_code == 400, response.text
