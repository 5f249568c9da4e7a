"""Skilldesk as `pip install` and the Docker image install it: built from what the Dockerfile
copies, imported from the install alone, run from a folder that is not the repository."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
SKILLS = sorted(p.name for p in (ROOT / "skills").iterdir() if (p / "SKILL.md").is_file())
WORKFLOWS = sorted(p.stem for p in (ROOT / "workflows").glob("*.yaml"))
# The repository's content folders and where the wheel carries them (setup.py).
CONTENT = {name: f"agents/bundled/{name}" for name in ("skills", "workflows", "prompts")}


def dockerfile_sources() -> list[str]:
    """What the Dockerfile copies from the build context: its COPY lines without --from."""
    sources: list[str] = []
    for line in (ROOT / "Dockerfile").read_text(encoding="utf-8").splitlines():
        words = line.split()
        if words[:1] == ["COPY"] and not any(w.startswith("--from") for w in words):
            sources += words[1:-1]
    return sources


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The package installed into a folder of its own, from a copy of the Docker build context
    (a build in the repository would leave build/ there, whose stale files a wheel takes in)."""
    base = tmp_path_factory.mktemp("installed")
    context = base / "context"
    context.mkdir()
    for name in dockerfile_sources():
        if (ROOT / name).is_dir():
            ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
            shutil.copytree(ROOT / name, context / name, ignore=ignore)
        else:
            shutil.copy2(ROOT / name, context / name)
    target = base / "site"
    options = ["--quiet", "--no-deps", "--no-index", "--no-build-isolation"]
    subprocess.run(
        [sys.executable, "-m", "pip", "install", *options, "--target", str(target), str(context)],
        check=True,
        timeout=300,
    )
    return target


def env_for(site: Path) -> dict[str, str]:
    """The environment of a process that imports Skilldesk from ``site`` and from nowhere else."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKILLDESK_")}
    env.update(
        PYTHONPATH=str(site),
        SKILLDESK_SKILLS_EMBEDDINGS="false",  # keywords only: no MiniLM to load
        SKILLDESK_LOG_FORMAT="json",
    )
    return env


def skilldesk_python(site: Path, cwd: Path, *args: str) -> str:
    """``python *args`` (``-c CODE`` or ``-m MODULE ...``) importing from ``site``: its output."""
    done = subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
        env=env_for(site),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def served(site: Path, tmp_path: Path) -> Iterator[str]:
    """``skilldesk serve`` of the installed package, ready; its working folder is tmp_path."""
    port = free_port()
    log = tmp_path / "serve.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "serve", "--port", str(port)],
            cwd=tmp_path,
            env=env_for(site),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, f"serve exited:\n{log.read_text()}"
            assert time.monotonic() < deadline, f"serve not ready:\n{log.read_text()}"
            try:
                if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=40)


def test_every_file_of_the_repository_the_service_reads_is_in_the_installed_package(
    site: Path,
) -> None:
    tracked = subprocess.run(
        ["git", "ls-files", "app", "agents", *CONTENT],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert "agents/skills/skill.schema.json" in tracked
    expected = []
    for path in tracked:
        top, _, rest = path.partition("/")
        if not Path(path).name.startswith("."):  # .gitkeep
            expected.append(f"{CONTENT[top]}/{rest}" if top in CONTENT else path)
    assert [p for p in expected if not (site / p).is_file()] == []


def test_the_installed_package_lists_its_bundled_skills_and_workflows_from_any_folder(
    site: Path, tmp_path: Path
) -> None:
    where = skilldesk_python(
        site, tmp_path, "-c", "import app, agents; print(app.__file__, agents.__file__)"
    )
    assert all(Path(p).is_relative_to(site) for p in where.split()), where  # not the checkout
    skills = json.loads(
        skilldesk_python(site, tmp_path, "-m", "app.cli", "skills", "list", "--json")
    )
    assert sorted(s["name"] for s in skills) == SKILLS
    workflows = json.loads(
        skilldesk_python(site, tmp_path, "-m", "app.cli", "workflows", "list", "--json")
    )
    assert sorted(w["name"] for w in workflows) == WORKFLOWS


def test_the_installed_package_serves_its_content_and_page_and_keeps_data_where_it_runs(
    site: Path, served: str, tmp_path: Path
) -> None:
    skills = httpx.get(f"{served}/v1/skills").json()
    assert skills["errors"] == []
    assert sorted(s["name"] for s in skills["skills"]) == SKILLS
    workflows = httpx.get(f"{served}/v1/workflows").json()
    assert workflows["errors"] == []
    assert sorted(w["name"] for w in workflows["workflows"]) == WORKFLOWS
    vendored = ("/static/vendor/mermaid.min.js", "/static/vendor/swagger-ui-bundle.js")
    for path in ("/", "/docs", "/static/js/main.js", *vendored):
        answer = httpx.get(f"{served}{path}", headers={"Accept-Encoding": "gzip"})
        assert answer.status_code == 200, path
        if path in vendored:  # their gzipped copies are installed too
            assert answer.headers["content-encoding"] == "gzip", path
    assert (tmp_path / "data" / "skilldesk.sqlite").is_file()
    assert not (site / "data").exists()  # an installed package's folder is not written to
