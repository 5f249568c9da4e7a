"""The threads suite runs on both stores: the SQLite file and PostgreSQL (the machine's
server, each test in a schema of its own, dropped after)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from tests.integration.test_server_process import service_env  # noqa: F401  (a fixture)
from tests.pgkit import schema_url
from tests.skillkit import copy_fixture_skill


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A checkpoint URL of an empty store of each kind."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'store' / 'threads.sqlite'}"
        return
    with schema_url() as url:
        yield url


@pytest.fixture
def thread_settings(model_settings: Any, store_url: str, tmp_path: Path) -> Any:
    """Settings on the store, with the storefront's order lookup installed."""
    skills = tmp_path / "skills"
    copy_fixture_skill(skills, "storefront/order-lookup")
    return model_settings.model_copy(
        update={"checkpoint_url": store_url, "skills_dir": skills, "retention_interval_s": 0}
    )


@pytest.fixture
def client(thread_settings: Any) -> Iterator[TestClient]:
    with TestClient(create_app(thread_settings)) as test_client:
        yield test_client


def say(client: TestClient, thread_id: str, message: str) -> list[tuple[str, dict[str, Any]]]:
    """Run one turn over HTTP; its events."""
    import json

    response = client.post(f"/v1/threads/{thread_id}/runs/stream", json={"message": message})
    assert response.status_code == 200, response.text
    events = []
    for block in response.text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines())
        events.append((lines["event"], json.loads(lines["data"])))
    assert events[-1][0] == "run_finished", events[-1]
    return events
