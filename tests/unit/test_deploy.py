"""``deploy/`` is what the README says and what the service reads. Docker cannot run in the
test command, so the files are parsed: the services, the settings each replica is given
(every one a real setting, loading as the service would), and the balancer's upstreams."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
import yaml

from app.settings import ENV_PREFIX, Settings, load_settings

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
REPLICAS = ("skilldesk-1", "skilldesk-2")
_VARIABLE = re.compile(r"\$\{(\w+)(?::([?-])([^}]*))?\}")


def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    return loaded


def example_env() -> dict[str, str]:
    lines = (DEPLOY / ".env.example").read_text().splitlines()
    pairs = (line.split("=", 1) for line in lines if line and not line.startswith("#"))
    return {name: value for name, value in pairs}


def interpolate(value: str, env: dict[str, str]) -> str:
    """``${NAME}``, ``${NAME:-default}`` and ``${NAME:?error}`` as docker compose reads them."""

    def one(match: re.Match[str]) -> str:
        name, kind, rest = match.groups()
        if env.get(name):
            return env[name]
        assert kind != "?", f"{name} must be set in deploy/.env: {rest}"
        return rest if kind == "-" else ""

    return _VARIABLE.sub(one, value)


def test_postgresql_redis_two_identical_replicas_and_a_balancer() -> None:
    services = compose()["services"]
    assert set(services) == {"postgres", "redis", *REPLICAS, "balancer"}
    first, second = (services[name] for name in REPLICAS)
    assert first == second  # identical processes: any of them serves any request
    build = first["build"]
    assert (DEPLOY / build["context"] / build["dockerfile"]).is_file()
    assert "data:/app/data" in first["volumes"]  # one data folder (attachments) for both
    assert first["depends_on"] == {
        "postgres": {"condition": "service_healthy"},
        "redis": {"condition": "service_healthy"},
    }
    assert services["balancer"]["ports"] == ["8080:80"]


def test_every_variable_a_replica_is_given_is_a_setting_that_loads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    services = compose()["services"]
    given = example_env()
    environment = {
        name: interpolate(str(value), given)
        for name, value in services["skilldesk-1"]["environment"].items()
    }
    unknown = [
        name
        for name in environment
        if not name.startswith(ENV_PREFIX)
        or name.removeprefix(ENV_PREFIX).lower() not in Settings.model_fields
    ]
    assert unknown == []
    for name in [n for n in os.environ if n.startswith(ENV_PREFIX)]:
        monkeypatch.delenv(name)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    settings = load_settings()
    database = urlparse(settings.resolved_checkpoint_url)
    postgres = services["postgres"]["environment"]
    assert database.scheme == "postgresql"
    assert (database.hostname, database.port) == ("postgres", 5432)
    assert database.username == postgres["POSTGRES_USER"]
    assert database.path == "/" + postgres["POSTGRES_DB"]
    assert database.password == given["POSTGRES_PASSWORD"]
    assert urlparse(settings.redis_url or "").hostname == "redis"
    assert settings.port == 8000
    # Docker waits longer than the service's grace period before it kills a replica.
    stop_after = int(services["skilldesk-1"]["stop_grace_period"].removesuffix("s"))
    assert stop_after > settings.shutdown_grace_s


def test_the_balancer_sends_to_both_replicas_unbuffered() -> None:
    balancer = compose()["services"]["balancer"]
    mounted = next(v for v in balancer["volumes"] if v.endswith(":/etc/nginx/nginx.conf:ro"))
    conf = (DEPLOY / mounted.split(":", 1)[0]).read_text()
    upstreams = re.findall(r"^\s*server\s+([\w.-]+):(\d+)", conf, flags=re.MULTILINE)
    assert sorted(upstreams) == [(name, "8000") for name in REPLICAS]
    assert "proxy_buffering off;" in conf  # Server-Sent Events pass as they come
    assert set(balancer["depends_on"]) == set(REPLICAS)
