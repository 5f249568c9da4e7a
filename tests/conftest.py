"""Shared fixtures: the network guard, a scripted model server, settings for a temp data dir."""

from __future__ import annotations

import os
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
os.environ["HF_HUB_OFFLINE"] = "1"

from tests import guard
from tests.fakellm import FakeLLM
from tests.skillkit import router_picks

guard.install()

pytest_plugins = ["pytester"]

_CALL_REPORT = pytest.StashKey[pytest.TestReport]()

_PROVIDER_ENV = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "DEEPSEEK_API_KEY")


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test sees the developer's SKILLDESK_* settings or provider keys."""
    for name in list(os.environ):
        if name.startswith("SKILLDESK_") or name in _PROVIDER_ENV:
            monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="session")
def _fake_llm_server() -> Iterator[FakeLLM]:
    with FakeLLM() as fake:
        yield fake


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Keep each test's call report for its fixtures; a failed test that used the scripted
    server shows what went off its script next to the failure."""
    report = yield
    if report.when == "call":
        item.stash[_CALL_REPORT] = report
        for name, fake in getattr(item, "funcargs", {}).items():
            if report.failed and isinstance(fake, FakeLLM) and (problems := fake.problems()):
                report.sections.append((f"FakeLLM script ({name})", "\n".join(problems)))
    return report


def _check_script(fake: FakeLLM, request: pytest.FixtureRequest) -> None:
    """Fail a test that passed if ``fake`` has replies left over or unscripted requests."""
    problems = fake.problems()
    report = request.node.stash.get(_CALL_REPORT, None)
    if problems and report is not None and report.passed:
        pytest.fail(
            f"{request.fixturename}: the script did not match:\n" + "\n".join(problems),
            pytrace=False,
        )


@pytest.fixture
def fake_llm(_fake_llm_server: FakeLLM, request: pytest.FixtureRequest) -> Iterator[FakeLLM]:
    """A scripted OpenAI-compatible server on loopback, emptied before each test.

    A router tie-break (a request forcing ``choose_route``) is answered "none" outside the
    script unless a test says otherwise (``router_picks``). A test that passes fails at
    teardown if scripted replies are left over or a request found no scripted reply,
    unless it said so (``fake_llm.allow_leftovers()``, ``fake_llm.allow_unscripted()``).
    """
    _fake_llm_server.reset()
    router_picks(_fake_llm_server, "none")
    yield _fake_llm_server
    try:
        _check_script(_fake_llm_server, request)
    finally:
        _fake_llm_server.reset()


@pytest.fixture
def backup_llm(request: pytest.FixtureRequest) -> Iterator[FakeLLM]:
    """A second scripted server (e.g. a fallback profile's), checked like ``fake_llm``."""
    with FakeLLM() as fake:
        yield fake
        _check_script(fake, request)


@pytest.fixture
def make_settings(tmp_path: Path) -> Any:
    """Build Settings with a temporary data dir; keyword arguments override."""
    from app.settings import Settings

    def build(**overrides: Any) -> Settings:
        # An empty skills folder, no watcher and keyword-only retrieval unless a test asks.
        values: dict[str, Any] = {
            "data_dir": tmp_path / "data",
            "skills_dir": tmp_path / "skills",
            "skills_watch": False,
            "skills_embeddings": False,
            "skills_write_examples": False,
        }
        values.update(overrides)
        return Settings(**values)

    return build


@pytest.fixture
def model_settings(make_settings: Any, fake_llm: FakeLLM) -> Any:
    """Settings whose default model profile is the scripted server."""
    return make_settings(
        model="openai/fake-model", model_api_base=fake_llm.base_url, model_api_key="sk-test"
    )
