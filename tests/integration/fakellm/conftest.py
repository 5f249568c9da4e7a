"""The scripted server the tests of tests/fakellm drive, one per module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from openai import OpenAI

from tests.fakellm import FakeLLM


@pytest.fixture(scope="module")
def server() -> Iterator[FakeLLM]:
    with FakeLLM() as fake:
        yield fake


@pytest.fixture
def fake(server: FakeLLM) -> FakeLLM:
    server.reset()
    return server


@pytest.fixture
def client(fake: FakeLLM) -> Iterator[OpenAI]:
    with OpenAI(base_url=fake.base_url, api_key="sk-test", max_retries=0, timeout=5) as c:
        yield c
