"""The web page in headless Chromium (Debian's `chromium`, driven by Playwright) against a
real `skilldesk serve` process with the bundled skills and workflows and the scripted model."""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fakellm import FakeLLM
from tests.integration.test_server_process import Service

ROOT = Path(__file__).parents[2]
CHROMIUM = "/usr/bin/chromium"
SCREENSHOTS = ROOT / "docs" / "screenshots"

sync_api = pytest.importorskip("playwright.sync_api")
if not os.access(CHROMIUM, os.X_OK):  # .ci/run installs it
    pytest.skip(f"needs Debian's chromium at {CHROMIUM}", allow_module_level=True)
# The machine is shared: a first answer (the service warming up) may take more than the
# default five seconds to show.
sync_api.expect.set_options(timeout=15_000)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    # Per module, not per session: while Playwright's sync API is open the main thread has an
    # event loop marked running, and the tests after these (asyncio.run, TestClient) would fail.
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM,
            # The audio test presses play itself; no sound device on a CI machine.
            args=["--autoplay-policy=no-user-gesture-required", "--mute-audio"],
        )
        yield browser
        browser.close()


@pytest.fixture
def content(tmp_path: Path) -> tuple[Path, Path]:
    """The skills and workflows folders the service serves: the bundled ones."""
    return ROOT / "skills", ROOT / "workflows"


@pytest.fixture
def extra_env() -> dict[str, str]:
    """More settings for the service (a test overrides it: API keys, say)."""
    return {}


@pytest.fixture
def service(
    fake_llm: FakeLLM, tmp_path: Path, content: tuple[Path, Path], extra_env: dict[str, str]
) -> Iterator[Service]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKILLDESK_")}
    env.update(
        SKILLDESK_SKILLS_DIR=str(content[0]),
        SKILLDESK_WORKFLOWS_DIR=str(content[1]),
        SKILLDESK_SKILLS_EMBEDDINGS="false",
        SKILLDESK_SKILLS_WATCH="false",
        SKILLDESK_MODEL="openai/fake-model",
        SKILLDESK_MODEL_API_BASE=fake_llm.base_url,
        SKILLDESK_MODEL_API_KEY="sk-test",
        SKILLDESK_LOG_FORMAT="json",
    )
    env.update(extra_env)
    running = Service(env, tmp_path / "data")
    yield running
    running.stop()


@pytest.fixture
def page(browser: Any, service: Service) -> Iterator[Any]:
    """A fresh browser context (its own sessionStorage) on the service's page; any error the
    page's scripts throw, and anything the Content-Security-Policy refuses, fails the test."""
    context = browser.new_context(base_url=service.url, viewport={"width": 1280, "height": 860})
    page = context.new_page()
    page.set_default_timeout(15_000)
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on(
        "console",
        lambda message: (
            message.type == "error"
            and "Content Security Policy" in message.text
            and errors.append(message.text)
        ),
    )
    yield page
    context.close()
    assert errors == [], errors


def screenshot(page: Any, name: str) -> None:
    """Take a screenshot (it must render); saved for the README (docs/screenshots) only when
    UPDATE_SCREENSHOTS=1, so a test run leaves the committed pictures alone."""
    image = page.screenshot()
    assert image[:8] == b"\x89PNG\r\n\x1a\n"
    if os.environ.get("UPDATE_SCREENSHOTS") == "1":
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        (SCREENSHOTS / f"{name}.png").write_bytes(image)


def run_time(service: Service, thread_id: str, run_id: str) -> str:
    """How long a run took as a trace's summary says it: from the times its kept trace
    records (the run's own, not the page's), "40 ms" under a second, "1.2 s" from one on."""
    record = httpx.get(f"{service.url}/v1/threads/{thread_id}/runs/{run_id}/trace").json()
    seconds = record["ended"] - record["started"]
    ms = math.floor(seconds * 1000 + 0.5)  # as the page's Math.round
    if ms < 1:
        return "< 1 ms"
    return f"{ms} ms" if ms < 1000 else f"{seconds:.1f} s"


def answered_by(service: Service, thread_id: str) -> list[str]:
    """The runs of a thread's answers, oldest first (each answer's ``run_id``)."""
    view = httpx.get(f"{service.url}/v1/threads/{thread_id}").json()
    return [m["run_id"] for m in view["messages"] if m.get("run_id")]
