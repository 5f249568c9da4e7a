"""`skilldesk serve` with a store it cannot reach (Redis, PostgreSQL) stops before it serves,
with a configuration error naming the setting, not a traceback; it reaches each once. An app
made by the factory (as in tests) stops its start-up with the same error."""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import app.services
from agents.errors import ConfigError
from agents.state import checkpointers
from app.cli import cli
from app.main import create_app
from app.shutdown import StoppingServer
from tests.integration.test_server_process import SKILLDESK, free_port
from tests.pgkit import POSTGRES, REDIS, schema_url

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
    [
        f"{POSTGRES}_no_such_db",
        f"postgresql://postgres@127.0.0.1:{free_port()}/test",
        f"{POSTGRES}?options=-csearch_path%3Dno_such_schema",
    ],
    ids=["no-such-db", "refused", "no-such-schema"],
)
def test_a_postgresql_it_cannot_reach_stops_start_up_naming_the_setting(
    tmp_path: Path, url: str
) -> None:
    done = _serve(tmp_path, SKILLDESK_CHECKPOINT_URL=url)
    assert done.returncode == 2, done.stderr
    assert "configuration error" in done.stderr
    assert "SKILLDESK_CHECKPOINT_URL" in done.stderr
    assert "Traceback" not in done.stderr + done.stdout


def _start_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **more: str) -> None:
    """`skilldesk serve` through its entry point, but the server: the app's start-up (its
    lifespan) runs, then it stops."""

    def start_then_stop(server: StoppingServer) -> None:
        async def lifespan() -> None:
            async with server.config.app.router.lifespan_context(server.config.app):
                pass

        asyncio.run(lifespan())

    monkeypatch.setattr(StoppingServer, "run", start_then_stop)
    monkeypatch.setattr("app.main.warm_up", lambda services: asyncio.sleep(0))
    monkeypatch.setattr("app.main.freeze_startup_heap", lambda: None)
    for name in [n for n in os.environ if n.startswith("SKILLDESK_")]:
        monkeypatch.delenv(name)
    (tmp_path / "skills").mkdir()
    for name, value in {
        "SKILLDESK_SKILLS_DIR": str(tmp_path / "skills"),
        "SKILLDESK_SKILLS_EMBEDDINGS": "false",
        "SKILLDESK_SKILLS_WATCH": "false",
        "SKILLDESK_DATA_DIR": str(tmp_path / "data"),
        **more,
    }.items():
        monkeypatch.setenv(name, value)
    done = CliRunner().invoke(cli, ["serve", "--port", str(free_port())], prog_name="skilldesk")
    assert done.exit_code == 0, done.output


def test_serve_reaches_redis_once_as_it_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reached: list[str] = []
    check = app.services.check_redis

    async def counted(url: str) -> None:
        reached.append(url)
        await check(url)

    monkeypatch.setattr(app.services, "check_redis", counted)
    _start_up(tmp_path, monkeypatch, SKILLDESK_REDIS_URL=REDIS)
    assert reached == [REDIS]


def test_serve_reaches_postgresql_once_as_it_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The checks before the server starts reached it, then opening the store did again.
    reached: list[str] = []
    check = checkpointers.check_checkpoint_store

    async def counted(url: str) -> None:
        reached.append(url)
        await check(url)

    for module in (app.services, checkpointers):
        monkeypatch.setattr(module, "check_checkpoint_store", counted)
    with schema_url() as url:
        _start_up(tmp_path, monkeypatch, SKILLDESK_CHECKPOINT_URL=url)
    assert reached == [url]


async def test_an_app_made_by_the_factory_stops_its_start_up_naming_redis(
    make_settings: Any,
) -> None:
    settings = make_settings(redis_url=f"redis://127.0.0.1:{free_port()}/0")
    made = create_app(settings)
    with pytest.raises(ConfigError, match="SKILLDESK_REDIS_URL"):
        async with made.router.lifespan_context(made):
            pass


async def test_a_skills_or_workflows_folder_that_is_not_there_is_said_at_start_up(
    model_settings: Any, tmp_path: Path
) -> None:
    # QA: a missing workflows folder was made without a word (the skills folder's is said).
    from structlog.testing import capture_logs

    from app.services import open_services

    settings = model_settings.model_copy(
        update={"skills_dir": tmp_path / "no-skills", "workflows_dir": tmp_path / "no-flows"}
    )
    with capture_logs() as logs:
        async with open_services(settings):
            pass
    said = {e["event"]: e for e in logs if e["event"].endswith(".folder_missing")}
    assert said["skills.folder_missing"]["directory"] == str(tmp_path / "no-skills")
    assert said["workflows.folder_missing"]["directory"] == str(tmp_path / "no-flows")
    assert "SKILLDESK_WORKFLOWS_DIR" in said["workflows.folder_missing"]["fix"]


async def test_a_broken_skill_and_workflow_are_each_logged_once_at_start_up(
    model_settings: Any, tmp_path: Path
) -> None:
    # QA: each problem was logged by its registry, then again by the start-up.
    from structlog.testing import capture_logs

    from app.services import open_services

    skills, flows = tmp_path / "skills", tmp_path / "workflows"
    (skills / "broken").mkdir(parents=True)
    (skills / "broken" / "SKILL.md").write_text("---\nname: broken\n---\nno description\n")
    flows.mkdir()
    (flows / "bad.yaml").write_text("name: bad\nnodes: [\n")
    settings = model_settings.model_copy(update={"skills_dir": skills, "workflows_dir": flows})
    with capture_logs() as logs:
        async with open_services(settings):
            pass
    about = [e for e in logs if "broken" in str(e) or "bad.yaml" in str(e)]
    assert [e["event"] for e in about] == ["skill.invalid", "workflow.invalid"], about
    assert about[0]["field"] == "description"
