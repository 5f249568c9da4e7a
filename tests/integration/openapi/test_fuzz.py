"""A property-based run of the whole OpenAPI document (schemathesis) against a real
`skilldesk serve` process with a key: generated requests, valid and not, find no 5xx, no
answer against its declared status, headers or schema, and no request with made-up
credentials let in. Routes that call the language model are
left to the probes (their scripted model has no answer for generated text)."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings

from tests.fakellm import FakeLLM
from tests.integration.openapi.kit import LOOKUP
from tests.integration.test_server_process import SKILLDESK, free_port
from tests.skillkit import copy_fixture_skill

KEY = "sdk_fuzzer-key-0123456789abcdef"
EXAMPLES = 10  # per operation: a few hundred requests in all, under a minute
MODEL_CALLING = r"^/v1/(chat/completions|threads/\{thread_id\}/(runs|runs/stream|resume))$"


@pytest.fixture(scope="module")
def served(_fake_llm_server: FakeLLM, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("fuzz")
    copy_fixture_skill(root / "skills", "storefront/order-lookup")
    (root / "workflows").mkdir()
    (root / "workflows" / "lookup.yaml").write_text(LOOKUP)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKILLDESK_")}
    env.update(
        SKILLDESK_SKILLS_DIR=str(root / "skills"),
        SKILLDESK_WORKFLOWS_DIR=str(root / "workflows"),
        SKILLDESK_SKILLS_EMBEDDINGS="false",
        SKILLDESK_SKILLS_WATCH="false",
        SKILLDESK_DATA_DIR=str(root / "data"),
        SKILLDESK_MODEL="openai/fake-model",
        SKILLDESK_MODEL_API_BASE=_fake_llm_server.base_url,
        SKILLDESK_LOG_LEVEL="warning",
        SKILLDESK_API_KEYS=f"fuzzer:admin:{KEY}",
        SKILLDESK_RATE_LIMIT_PER_MINUTE="0",
    )
    port = free_port()
    log = (root / "serve.log").open("w")
    proc = subprocess.Popen(
        [SKILLDESK, "serve", "--port", str(port)], env=env, stdout=log, stderr=subprocess.STDOUT
    )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            assert proc.poll() is None, (root / "serve.log").read_text()
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        log.close()


def test_generated_requests_find_no_server_error_and_no_undocumented_answer(
    served: str,
) -> None:
    api = schemathesis.openapi.from_url(f"{served}/openapi.json").exclude(path_regex=MODEL_CALLING)
    failures: list[str] = []
    tried, calls = 0, [0]
    for found in api.get_all_operations():
        operation = found.ok()

        @given(case=operation.as_strategy())
        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            database=None,
            derandomize=True,  # the same cases every run: a failure reproduces
            suppress_health_check=list(HealthCheck),
        )
        def check(case: schemathesis.Case) -> None:
            calls[0] += 1
            case.call_and_validate(timeout=30, headers={"Authorization": f"Bearer {KEY}"})

        try:
            check()
        except BaseException as exc:  # each operation's first failure, reported at the end
            if isinstance(exc, KeyboardInterrupt | SystemExit):
                raise
            failures.append(f"{operation.label}: {str(exc)[:2000]}")
        tried += 1
    assert tried > 30
    assert calls[0] >= 200, calls  # a few hundred generated requests
    assert failures == [], "\n\n".join(failures)
