"""Redis lost while the service runs: /readyz says so (503, naming Redis) and keyed requests,
whose rate limit lives there, get a 503 `dependency_unavailable` they may retry, not a 500;
both recover when Redis is back."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient

from app.main import create_app
from tests.integration.auth.conftest import bearer
from tests.integration.test_server_process import free_port

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server"),
]


class PrivateRedis:
    """A redis-server of the test's own, on a free port, that it may stop and start."""

    def __init__(self, folder: Path) -> None:
        self.port, self.folder = free_port(), folder
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--save", "", "--appendonly", "no"],
            cwd=self.folder,
            stdout=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                redis.Redis.from_url(self.url).ping()
                return
            except redis.ConnectionError:
                time.sleep(0.05)
        raise AssertionError("redis-server did not start")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    server = PrivateRedis(tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def test_redis_lost_makes_the_service_unready_and_requests_503_until_it_is_back(
    keyed_settings: Any, private_redis: PrivateRedis
) -> None:
    settings = keyed_settings.model_copy(update={"redis_url": private_redis.url})
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        assert client.get("/readyz").status_code == 200
        assert client.get("/v1/me", headers=bearer("alice")).status_code == 200

        private_redis.stop()
        ready = client.get("/readyz")
        assert ready.status_code == 503
        assert "Redis" in ready.json()["error"]
        assert "SKILLDESK_REDIS_URL" in ready.json()["error"]
        refused = client.get("/v1/me", headers=bearer("alice"))
        assert refused.status_code == 503
        error = refused.json()["error"]
        assert error["code"] == "dependency_unavailable"
        assert "Redis" in error["message"]

        private_redis.start()  # the same port: the clients connect again by themselves
        assert client.get("/readyz").status_code == 200
        assert client.get("/v1/me", headers=bearer("alice")).status_code == 200
