"""`skilldesk serve` on a public address: without keys it refuses to start, naming the
settings that fix it; with a key given in the environment it serves only requests with it."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import httpx

from tests.integration.test_server_process import SKILLDESK, free_port

KEY = "sdk_serve-test-key-0123456789"


def _env(tmp_path: Path, **more: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKILLDESK_")}
    (tmp_path / "skills").mkdir(exist_ok=True)
    env.update(
        SKILLDESK_SKILLS_DIR=str(tmp_path / "skills"),
        SKILLDESK_SKILLS_EMBEDDINGS="false",
        SKILLDESK_DATA_DIR=str(tmp_path / "data"),
        **more,
    )
    return env


def test_without_keys_a_public_bind_refuses_to_start_naming_the_settings(tmp_path: Path) -> None:
    done = subprocess.run(
        [SKILLDESK, "serve", "--host", "0.0.0.0", "--port", str(free_port())],
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert "SKILLDESK_API_KEYS" in done.stderr
    assert "SKILLDESK_AUTH_DISABLED" in done.stderr
    assert "skilldesk keys create" in done.stderr


def test_with_a_key_in_the_environment_a_public_bind_serves_only_with_it(tmp_path: Path) -> None:
    port = free_port()
    env = _env(tmp_path, SKILLDESK_API_KEYS=f"ops:chat:{KEY}")
    proc = subprocess.Popen(
        [SKILLDESK, "serve", "--host", "0.0.0.0", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(600):
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None, "the service exited"
            time.sleep(0.1)
        assert httpx.get(f"{url}/v1/threads").status_code == 401
        me = httpx.get(f"{url}/v1/me", headers={"Authorization": f"Bearer {KEY}"})
        assert me.json()["user"] == "ops"
        assert httpx.get(f"{url}/readyz").json()["auth"] == "api_keys"
    finally:
        proc.terminate()
        proc.wait(timeout=20)
