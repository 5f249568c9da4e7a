"""`skilldesk serve` with a store it cannot reach (Redis, PostgreSQL) stops before it serves,
with a configuration error naming the setting, not a traceback."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.integration.test_server_process import SKILLDESK, free_port
from tests.pgkit import POSTGRES

pytestmark = pytest.mark.integration


def _serve(tmp_path: Path, **more: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKILLDESK_")}
    (tmp_path / "skills").mkdir(exist_ok=True)
    env.update(
        SKILLDESK_SKILLS_DIR=str(tmp_path / "skills"),
        SKILLDESK_SKILLS_EMBEDDINGS="false",
        SKILLDESK_DATA_DIR=str(tmp_path / "data"),
        **more,
    )
    return subprocess.run(
        [SKILLDESK, "serve", "--port", str(free_port())],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    "url",
    [
        f"redis://127.0.0.1:{free_port()}/0",  # nothing listens there
        "redis://127.0.0.1:6379/99",  # a database Redis does not have
        "redis://no-such-host.invalid:6379/0",
        "http://127.0.0.1:6379/0",
    ],
    ids=["refused", "no-such-db", "unknown-host", "http"],
)
def test_a_redis_it_cannot_reach_stops_start_up_naming_the_setting(
    tmp_path: Path, url: str
) -> None:
    done = _serve(tmp_path, SKILLDESK_REDIS_URL=url)
    assert done.returncode == 2, done.stderr
    assert "configuration error" in done.stderr
    assert "SKILLDESK_REDIS_URL" in done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    assert "service.ready" not in done.stderr + done.stdout


@pytest.mark.parametrize(
    "url",
    [f"{POSTGRES}_no_such_db", f"postgresql://postgres@127.0.0.1:{free_port()}/test"],
    ids=["no-such-db", "refused"],
)
def test_a_postgresql_it_cannot_reach_stops_start_up_naming_the_setting(
    tmp_path: Path, url: str
) -> None:
    done = _serve(tmp_path, SKILLDESK_CHECKPOINT_URL=url)
    assert done.returncode == 2, done.stderr
    assert "configuration error" in done.stderr
    assert "SKILLDESK_CHECKPOINT_URL" in done.stderr
    assert "Traceback" not in done.stderr + done.stdout
