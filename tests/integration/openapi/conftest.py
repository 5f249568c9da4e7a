"""The apps of the OpenAPI tests, and their document: one open (development mode: no key
exists) for nearly every request, and one with an admin key for the requests that make keys."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr

from app.main import create_app
from app.settings import Settings
from tests.contract import (
    Document,
)
from tests.fakellm import FakeLLM
from tests.integration.openapi.kit import ADMIN_KEY, LIMIT, LOOKUP
from tests.skillkit import copy_fixture_skill, write_skill


@pytest.fixture(scope="module")
def openapi_settings(
    _fake_llm_server: FakeLLM, tmp_path_factory: pytest.TempPathFactory
) -> Settings:
    """Two skills and a broken one, a default model profile and an impatient one (for
    timeouts), a small body limit; no keys."""
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
        return Settings(
            data_dir=root / "data",
            skills_dir=skills,
            skills_watch=False,
            skills_embeddings=False,
            workflows_dir=root / "workflows",
            models_file=models,
            max_request_bytes=LIMIT,
        )


@pytest.fixture(scope="module")
def client(openapi_settings: Settings) -> Iterator[TestClient]:
    """One open app for the module (development mode: no request needs a key, so none may
    make one); server errors are answered, not raised."""
    with TestClient(create_app(openapi_settings), raise_server_exceptions=False) as test_client:
        yield test_client


@pytest.fixture(scope="module")
def admin_client(
    openapi_settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TestClient]:
    """The same app with keys, for the requests that make keys (the first key made in
    ``client`` would end its development mode: every later request there would get a 401):
    an admin key from the settings, sent with every request; a store of its own."""
    keyed = openapi_settings.model_copy(
        update={
            "data_dir": tmp_path_factory.mktemp("openapi-admin") / "data",
            "api_keys": SecretStr(f"root:admin:{ADMIN_KEY}"),
        }
    )
    app = create_app(keyed)
    auth = {"Authorization": f"Bearer {ADMIN_KEY}"}
    with TestClient(app, raise_server_exceptions=False, headers=auth) as test_client:
        yield test_client


@pytest.fixture(scope="module")
def document(client: TestClient) -> Document:
    response = client.get("/openapi.json")
    assert response.status_code == 200
    return dict(response.json())


@pytest.fixture(scope="module")
def admin_document(admin_client: TestClient) -> Document:
    response = admin_client.get("/openapi.json")
    assert response.status_code == 200
    return dict(response.json())
