"""The gate in the OpenAPI document: every operation behind it answers a request without a
key with its documented 401, one with a key lacking the scope with its documented 403, and a
key over its rate with its documented 429; another user's thread is a documented 404."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr

from app.auth.ratelimit import RedisRateLimiter
from app.main import create_app
from app.settings import Settings
from tests.contract import Document, check_documented
from tests.fakellm import FakeLLM
from tests.integration.openapi.kit import CHAT, RUN, USER
from tests.integration.test_server_process import free_port
from tests.skillkit import copy_fixture_skill

KEYS = {"alice": "sdk_alice-0123456789abcdef", "bob": "sdk_bob-0123456789abcdef00"}
NOBODY = "sdk_nobody-0123456789abcdef"  # a key with no scope at all


@dataclass(frozen=True)
class KeyedProbe:
    """A request of bob's at alice's thread ``a-1``, and the status it must get."""

    name: str
    method: str
    path: str
    status: int
    json: Any = None
    headers: dict[str, str] | None = None


KEYED_PROBES = [
    KeyedProbe(
        "chat on another's thread", "POST", CHAT, 404, {"messages": [USER]}, {"X-Thread-Id": "a-1"}
    ),
    KeyedProbe("run on another's thread", "POST", RUN.format("a-1"), 404, {"message": "hi"}),
    KeyedProbe("start on another's thread", "POST", "/v1/threads/a-1/runs", 404, {"message": "hi"}),
]


@pytest.fixture(scope="module")
def keyed(
    _fake_llm_server: FakeLLM, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TestClient]:
    root = tmp_path_factory.mktemp("keyed-openapi")
    copy_fixture_skill(root / "skills", "storefront/order-lookup")
    entries = " ".join(f"{u}:chat,tools:{k}" for u, k in KEYS.items()) + f" nobody::{NOBODY}"
    with pytest.MonkeyPatch.context() as env:
        for name in [n for n in os.environ if n.startswith("SKILLDESK_")]:
            env.delenv(name)
        settings = Settings(
            data_dir=root / "data",
            skills_dir=root / "skills",
            workflows_dir=root / "none",
            skills_watch=False,
            skills_embeddings=False,
            model="openai/fake-model",
            model_api_base=_fake_llm_server.base_url,
            api_keys=SecretStr(entries),
            rate_limit_per_minute=1000,
            metrics_token=SecretStr("metrics-0123456789"),  # /metrics behind a token too
        )
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        made = client.post("/v1/threads", json={"thread_id": "a-1"}, headers=_auth(KEYS["alice"]))
        assert made.status_code == 201, made.text
        yield client


@pytest.fixture(scope="module")
def keyed_document(keyed: TestClient) -> Document:
    return dict(keyed.get("/openapi.json").json())


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _path(template: str) -> str:
    """A concrete path of the template (the gate answers before anything is looked up)."""
    return (
        template.replace("{thread_id}", "p-1")
        .replace("{run_id}", str(uuid.uuid4()))
        .replace("{attachment_id}", "att_0")
        .replace("{approval_id}", "x-approve-0")
        .replace("{name}", "order-lookup")
        .replace("{tool}", "get_order")
    )


def _operations(document: Document, status: str) -> list[tuple[str, str]]:
    return [
        (method.upper(), template)
        for template, item in document["paths"].items()
        for method, op in item.items()
        if status in op["responses"]
    ]


@pytest.mark.parametrize("probe", KEYED_PROBES, ids=[p.name for p in KEYED_PROBES])
def test_another_users_thread_is_a_documented_404(
    keyed: TestClient, keyed_document: Document, probe: KeyedProbe
) -> None:
    headers = {**_auth(KEYS["bob"]), **(probe.headers or {})}
    response = keyed.request(probe.method, probe.path, json=probe.json, headers=headers)
    assert response.status_code == probe.status, response.text
    check_documented(keyed_document, probe.method, probe.path, response)


def test_every_operation_behind_the_gate_answers_no_key_with_its_documented_401(
    keyed: TestClient, keyed_document: Document
) -> None:
    operations = _operations(keyed_document, "401")
    assert len(operations) > 30  # every route but health, metadata and the document
    for method, template in operations:
        path = _path(template)
        response = keyed.request(method, path, json={} if method != "GET" else None)
        assert response.status_code == 401, (method, template, response.text)
        check_documented(keyed_document, method, path, response)


def test_every_operation_that_needs_a_scope_answers_a_key_without_it_with_403(
    keyed: TestClient, keyed_document: Document
) -> None:
    operations = _operations(keyed_document, "403")
    assert {t for _, t in operations} >= {"/v1/threads", "/v1/tools", "/v1/approvals"}
    for method, template in operations:
        path = _path(template)
        body = {} if method != "GET" else None
        response = keyed.request(method, path, json=body, headers=_auth(NOBODY))
        assert response.status_code == 403, (method, template, response.text)
        check_documented(keyed_document, method, path, response)


def test_every_operation_behind_the_gate_answers_a_key_over_its_rate_with_429(
    keyed: TestClient, keyed_document: Document, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = keyed.app.state.gate  # type: ignore[attr-defined]
    monkeypatch.setattr(gate.limiter, "per_minute", 0)  # every request is over the rate
    for method, template in _operations(keyed_document, "429"):
        path = _path(template)
        body = {} if method != "GET" else None
        response = keyed.request(method, path, json=body, headers=_auth(KEYS["alice"]))
        assert response.status_code == 429, (method, template, response.text)
        check_documented(keyed_document, method, path, response)


def test_every_operation_behind_the_gate_answers_with_redis_lost_with_its_documented_503(
    keyed: TestClient, keyed_document: Document, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = keyed.app.state.gate  # type: ignore[attr-defined]
    lost = RedisRateLimiter(1000, f"redis://127.0.0.1:{free_port()}/0")  # nothing answers there
    monkeypatch.setattr(gate, "limiter", lost)
    operations = _operations(keyed_document, "429")  # every one whose key's rate is counted
    assert set(operations) <= set(_operations(keyed_document, "503"))
    try:
        for method, template in operations:
            path = _path(template)
            body = {} if method != "GET" else None
            response = keyed.request(method, path, json=body, headers=_auth(KEYS["alice"]))
            assert response.status_code == 503, (method, template, response.text)
            assert response.json()["error"]["code"] == "dependency_unavailable"
            check_documented(keyed_document, method, path, response)
    finally:
        keyed.portal.call(lost.aclose)  # type: ignore[union-attr]
