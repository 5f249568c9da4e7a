"""One app for the OpenAPI tests, and its document."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import Settings
from tests.contract import (
    Document,
)
from tests.fakellm import FakeLLM
from tests.integration.openapi.kit import LIMIT, LOOKUP
from tests.skillkit import copy_fixture_skill, write_skill


@pytest.fixture(scope="module")
def client(
    _fake_llm_server: FakeLLM, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TestClient]:
    """One app for the module: two skills and a broken one, a default model profile and an
    impatient one (for timeouts), a small body limit; server errors are answered, not raised."""
    root = tmp_path_factory.mktemp("openapi")
    skills = root / "skills"
    copy_fixture_skill(skills, "storefront/order-lookup")
    write_skill(
        skills, "weather-report", "Current weather for a city.", config={"triggers": ["weather"]}
    )
    (root / "workflows").mkdir()
    (root / "workflows" / "lookup.yaml").write_text(LOOKUP)
    (skills / "broken").mkdir()
    (skills / "broken" / "SKILL.md").write_text("---\nname: Broken Name\n---\nbody\n")
    models, base = root / "models.yaml", _fake_llm_server.base_url
    profile = f"{{model: openai/fake-model, api_base: '{base}'"
    models.write_text(
        f"default: main\nprofiles:\n  main: {profile}}}\n"
        f"  impatient: {profile}, timeout_s: 0.3, retries: 0}}\n"
    )
    with pytest.MonkeyPatch.context() as env:  # the developer's settings stay out
        for name in [n for n in os.environ if n.startswith("SKILLDESK_")]:
            env.delenv(name)
        settings = Settings(
            data_dir=root / "data",
            skills_dir=skills,
            skills_watch=False,
            skills_embeddings=False,
            workflows_dir=root / "workflows",
            models_file=models,
            max_request_bytes=LIMIT,
        )
    with TestClient(create_app(settings), raise_server_exceptions=False) as test_client:
        yield test_client


@pytest.fixture(scope="module")
def document(client: TestClient) -> Document:
    response = client.get("/openapi.json")
    assert response.status_code == 200
    return dict(response.json())
