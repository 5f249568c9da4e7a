"""GET /metrics counts what the service did: a turn, its route, its model calls and tokens,
its tool call, a failed turn's error, a checkpoint write, a workflow run and its approval."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from pydantic import SecretStr

from app.main import create_app
from tests.fakellm import FakeLLM, Reply, ToolCall
from tests.skillkit import copy_fixture_skill

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def client(model_settings: Any, tmp_path: Path) -> Iterator[TestClient]:
    skills = tmp_path / "skills"
    copy_fixture_skill(skills, "storefront/order-lookup")
    settings = model_settings.model_copy(update={"skills_dir": skills})
    with TestClient(create_app(settings)) as test_client:
        yield test_client


def scrape(client: TestClient) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def grew(before: dict[Any, float], after: dict[Any, float], name: str, **labels: str) -> float:
    key = (name, tuple(sorted(labels.items())))
    return after.get(key, 0.0) - before.get(key, 0.0)


def test_a_turn_with_a_tool_call_is_counted(client: TestClient, fake_llm: FakeLLM) -> None:
    before = scrape(client)
    fake_llm.script(
        Reply(tool_calls=[ToolCall("get_order", {"order_id": "ORD1001"})]),
        Reply(content="ORD1001 has shipped."),
    )
    response = client.post(
        "/v1/threads/m-1/runs/stream",
        json={"message": "where is my order ORD1001?", "skill": "order-lookup"},
    )
    assert response.status_code == 200
    after = scrape(client)
    assert grew(before, after, "skilldesk_turns_total", outcome="finished") == 1
    assert grew(before, after, "skilldesk_routes_total", kind="skill", by="explicit") == 1
    assert grew(before, after, "skilldesk_model_calls_total", profile="default", outcome="ok") == 2
    assert grew(before, after, "skilldesk_model_tokens_total", profile="default", kind="input") > 0
    ok = {"skill": "order-lookup", "tool": "get_order", "outcome": "ok"}
    assert grew(before, after, "skilldesk_tool_calls_total", **ok) == 1
    assert grew(before, after, "skilldesk_tool_call_seconds_count", skill="order-lookup") == 1
    assert grew(before, after, "skilldesk_checkpoint_write_seconds_count", store="sqlite") >= 3
    assert grew(before, after, "skilldesk_model_first_token_seconds_count", profile="default") == 2
    # The gauge is the process's: back where it was (another test's stand-in run may count).
    active = ("skilldesk_runs_active", ())
    assert after[active] == before[active]


def test_a_failed_turn_and_a_refused_tool_call_are_counted_by_code(
    client: TestClient, fake_llm: FakeLLM
) -> None:
    before = scrape(client)
    fake_llm.script(
        Reply(tool_calls=[ToolCall("get_order", {"order_id": 7})]),  # not a string
        Reply(content="That order id is not valid."),
        *[Reply(status=500)] * 3,
    )
    client.post(
        "/v1/threads/m-2/runs/stream", json={"message": "order 7?", "skill": "order-lookup"}
    )
    client.post("/v1/threads/m-2/runs/stream", json={"message": "again?"})
    after = scrape(client)
    refused = {"skill": "order-lookup", "tool": "get_order", "outcome": "invalid_arguments"}
    assert grew(before, after, "skilldesk_tool_calls_total", **refused) == 1
    assert grew(before, after, "skilldesk_turns_total", outcome="failed") == 1
    assert grew(before, after, "skilldesk_errors_total", code="model_unavailable") == 1
    assert (
        grew(before, after, "skilldesk_model_calls_total", profile="default", outcome="failed") == 1
    )


def test_a_workflow_waiting_for_approval_is_counted_until_decided(model_settings: Any) -> None:
    settings = model_settings.model_copy(
        update={"skills_dir": ROOT / "skills", "workflows_dir": ROOT / "workflows"}
    )
    with TestClient(create_app(settings)) as client:
        _approval_counted(client)


def _approval_counted(client: TestClient) -> None:
    before = scrape(client)
    started = client.post(
        "/v1/workflows/refund-request/runs", json={"inputs": {"order_id": "ORD1002"}}
    )
    assert started.status_code == 200, started.text
    waiting = scrape(client)
    assert (
        grew(
            before,
            waiting,
            "skilldesk_workflow_runs_total",
            workflow="refund-request",
            status="WAITING",
        )
        == 1
    )
    assert waiting[("skilldesk_approvals_waiting", ())] >= 1
    approval = started.json()["waiting"]["approval_id"]
    decided = client.post(f"/v1/approvals/{approval}", json={"decision": "approve"})
    assert decided.status_code == 200
    after = scrape(client)
    assert (
        after[("skilldesk_approvals_waiting", ())]
        == waiting[("skilldesk_approvals_waiting", ())] - 1
    )
    assert (
        grew(
            before,
            after,
            "skilldesk_workflow_runs_total",
            workflow="refund-request",
            status="SUCCEEDED",
        )
        == 1
    )


def test_metrics_ask_for_their_token_when_one_is_set(model_settings: Any) -> None:
    settings = model_settings.model_copy(update={"metrics_token": SecretStr("scrape-me-1234")})
    with TestClient(create_app(settings)) as client:
        for sent in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "scrape-me-1234"}):
            refused = client.get("/metrics", headers=sent)
            assert refused.status_code == 401, sent
            assert refused.json()["error"]["code"] == "invalid_metrics_token"
            assert refused.headers["WWW-Authenticate"].startswith("Bearer")
        scraped = client.get("/metrics", headers={"Authorization": "Bearer scrape-me-1234"})
        assert scraped.status_code == 200
        assert "skilldesk_" in scraped.text


def test_a_cancelled_turn_is_counted(client: TestClient, fake_llm: FakeLLM) -> None:
    # QA: cancelled runs were never counted in skilldesk_turns_total.
    import time

    before = scrape(client)
    fake_llm.script(Reply(content="too late", delay=2.0))
    started = client.post("/v1/threads/m-3/runs", json={"message": "slow one"}).json()
    for _ in range(100):  # until it is at its model call
        if fake_llm.scripted_requests:
            break
        time.sleep(0.02)
    assert client.post(f"/v1/threads/m-3/runs/{started['id']}/cancel").status_code == 200
    for _ in range(200):
        if client.get(f"/v1/threads/m-3/runs/{started['id']}").json()["status"] == "cancelled":
            break
        time.sleep(0.02)
    after = scrape(client)
    assert grew(before, after, "skilldesk_turns_total", outcome="cancelled") == 1
