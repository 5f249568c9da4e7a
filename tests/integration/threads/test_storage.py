"""What a thread keeps: an old-shape checkpoint read and carried on; retention that prunes
old checkpoints and idle threads (dry or not); the store's files never in the repository."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from agents.state.retention import thread_bytes
from app.main import create_app
from tests.fakellm import FakeLLM, Reply
from tests.integration.threads.conftest import say

ROOT = Path(__file__).resolve().parents[3]
SCHEMA_1 = ROOT / "tests" / "fixtures" / "checkpoints" / "schema-1.sqlite"


def test_a_checkpoint_of_schema_1_is_read_and_carried_on(
    model_settings: Any, tmp_path: Path, fake_llm: FakeLLM
) -> None:
    # Written by main at 9131358 (schema 1: no attachments): a tool call, its result, answers.
    store = tmp_path / "old.sqlite"
    shutil.copyfile(SCHEMA_1, store)
    settings = model_settings.model_copy(
        update={"checkpoint_url": f"sqlite:///{store}", "retention_interval_s": 0}
    )
    with TestClient(create_app(settings)) as client:
        thread = client.get("/v1/threads/v1-thread").json()
        assert [m["role"] for m in thread["messages"]] == [
            "human",
            "ai",
            "tool",
            "ai",
            "human",
            "ai",
        ]
        assert thread["attachments"] == []  # a default, never null
        assert thread["usage"]["model_calls"] == 4
        listed = client.get("/v1/threads").json()["data"]
        assert listed == []  # no record yet: schema 1 had none
        record = client.patch("/v1/threads/v1-thread", json={"title": "Old order"})
        assert record.status_code == 200  # the record is made from the state on demand
        assert record.json()["messages"] == 6

        fake_llm.script(Reply(content="Still shipped."))
        say(client, "v1-thread", "and now?")
        after = client.get("/v1/threads/v1-thread").json()
        assert len(after["messages"]) == 8
        assert after["usage"]["model_calls"] == 5
        # The model read the old history, tool call and result included.
        sent = fake_llm.requests[-1]["messages"]
        assert any(m.get("role") == "tool" for m in sent)
        history = client.get("/v1/threads/v1-thread/history").json()["data"]
        assert history[0]["messages"] == 8


def test_retention_keeps_the_newest_checkpoints_and_the_thread_works_on(
    client: TestClient, fake_llm: FakeLLM
) -> None:
    fake_llm.script(*[Reply(content=f"Answer {i}.") for i in range(5)])
    for i in range(4):
        say(client, "long", f"Message {i}.")
    say(client, "short", "Only one.")
    services = client.app.state.services  # type: ignore[attr-defined]
    before = len(client.get("/v1/threads/long/history", params={"limit": 200}).json()["data"])
    assert before > 10

    dry = client.portal.call(_prune, services, 3, True)  # type: ignore[union-attr]
    assert dry.dry_run
    assert dry.checkpoints_deleted == (before - 3) + (4 - 3)  # "short" has 4 checkpoints
    assert (
        len(client.get("/v1/threads/long/history", params={"limit": 200}).json()["data"]) == before
    )

    full = client.portal.call(thread_bytes, services.checkpointer, "long")  # type: ignore[union-attr]
    done = client.portal.call(_prune, services, 3, False)  # type: ignore[union-attr]
    assert done.checkpoints_deleted == dry.checkpoints_deleted
    history = client.get("/v1/threads/long/history", params={"limit": 200}).json()["data"]
    assert len(history) == 3
    stored = client.portal.call(thread_bytes, services.checkpointer, "long")  # type: ignore[union-attr]
    assert stored["checkpoints"] == 3
    assert stored["bytes"] < full["bytes"] / 2  # the values only old checkpoints used went too
    # The current state is whole, and the next turn reads all of it.
    assert len(client.get("/v1/threads/long").json()["messages"]) == 8
    fake_llm.script(Reply(content="Answer 5."))
    say(client, "long", "Message 4.")
    assert "Message 0." in str(fake_llm.requests[-1]["messages"])
    assert len(client.get("/v1/threads/long").json()["messages"]) == 10


def test_retention_deletes_threads_idle_too_long(client: TestClient, fake_llm: FakeLLM) -> None:
    fake_llm.script(Reply(content="Hi."), Reply(content="Hello."))
    say(client, "old", "Hello")
    say(client, "new", "Hello")
    services = client.app.state.services  # type: ignore[attr-defined]
    new_updated = client.get("/v1/threads").json()["data"][0]["updated"]
    # "new" counts as updated now and "old" a little before: an idle cutoff between them.
    services.threads.retention = type(services.threads.retention)(keep_checkpoints=0, idle_days=1)
    later = new_updated + 86400 - 0.0001
    report = client.portal.call(lambda: services.threads.prune(now=later))  # type: ignore[union-attr]
    assert report.threads_deleted == ["old"]
    assert client.get("/v1/threads/old").status_code == 404
    assert client.get("/v1/threads/new").status_code == 200


def test_retention_visits_every_thread_once_past_a_page_of_equal_times(
    client: TestClient,
) -> None:
    # It walks the records 200 at a time; by time alone it stopped at the first page when
    # more than 200 threads were last updated at the same instant.
    services = client.app.state.services  # type: ignore[attr-defined]
    ids = sorted(f"t-{n:03}" for n in range(450))
    visited: list[str] = []

    async def run() -> None:
        for thread_id in ids:
            body = {"thread_id": thread_id, "status": "idle", "updated": 1e9}
            await services.threads.records.documents.put("thread", thread_id, body, updated=1e9)

        async def prune_one(thread_id: str, report: Any) -> None:
            visited.append(thread_id)

        services.threads._prune_one = prune_one
        services.threads.retention = type(services.threads.retention)(keep_checkpoints=5)
        await services.threads.prune()

    client.portal.call(run)  # type: ignore[union-attr]
    assert sorted(visited) == ids  # each once


def test_data_files_cannot_be_committed() -> None:
    for path in ("t.sqlite", "bench/out.sqlite-wal", "data/x.db", "speech.wav"):
        assert subprocess.run(["git", "check-ignore", "-q", path], cwd=ROOT).returncode == 0, path
    tracked = subprocess.run(
        ["git", "ls-files", "*.sqlite", "*.db", "*.wav"], cwd=ROOT, capture_output=True, text=True
    ).stdout.split()
    assert tracked == [] or all(p.startswith("tests/fixtures/checkpoints/") for p in tracked)


async def _prune(services: Any, keep: int, dry_run: bool) -> Any:
    services.threads.retention = type(services.threads.retention)(keep_checkpoints=keep)
    return await services.threads.prune(dry_run=dry_run)


def test_an_sqlite_checkpoint_stores_each_value_once_not_the_whole_state_each_step(
    model_settings: Any, tmp_path: Path, fake_llm: FakeLLM
) -> None:
    store = tmp_path / "blobs.sqlite"
    settings = model_settings.model_copy(update={"checkpoint_url": f"sqlite:///{store}"})
    long = "a long message " * 200  # 3 KB a turn
    fake_llm.script(*[Reply(content=f"Answer {i}.") for i in range(4)])
    with TestClient(create_app(settings)) as client:
        for i in range(4):
            say(client, "big", f"{long} {i}")
    import sqlite3

    with sqlite3.connect(store) as conn:
        rows = conn.execute("SELECT length(checkpoint) FROM checkpoints").fetchall()
        messages = conn.execute(
            "SELECT count(*), max(length(blob)) FROM skilldesk_blobs WHERE channel = 'messages'"
        ).fetchone()
    assert max(size for (size,) in rows) < 4096  # versions only, not the 12 KB history
    assert messages[1] > 12_000  # the latest history, stored once under its version
    assert messages[0] < len(rows)  # a step that left the messages alone wrote none
