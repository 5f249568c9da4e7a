"""Processes started together on an empty PostgreSQL database all set its schema up: the
checkpoint tables and their migrations, the leases, the documents and their indexes, the
call journal."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from structlog.testing import capture_logs

from agents.errors import ConfigError
from agents.state import schema_lock
from agents.state.call_stores import call_journal
from agents.state.checkpointers import open_checkpointer
from agents.state.documents import documents_for
from tests.integration.test_server_process import SKILLDESK, free_port
from tests.pgkit import POSTGRES, schema_url

pytestmark = pytest.mark.integration

PROCESSES = 4


async def _start(url: str) -> None:
    """What a service process does to its store at start."""
    async with open_checkpointer(url) as saver:
        await documents_for(saver).get("probe", "none")
        await call_journal(saver).get("none")


@pytest.mark.parametrize("attempt", range(3))
async def test_processes_started_together_on_an_empty_database_all_start(attempt: int) -> None:
    with schema_url() as url:
        results = await asyncio.gather(
            *(_start(url) for _ in range(PROCESSES)), return_exceptions=True
        )
        assert [r for r in results if r is not None] == []
        async with open_checkpointer(url) as saver:  # and the schema is whole
            pool = saver.conn  # type: ignore[attr-defined]
            async with pool.connection() as conn:
                cursor = await conn.execute(
                    "SELECT count(*) AS n FROM pg_index JOIN pg_class c ON c.oid = indexrelid"
                    " WHERE c.relnamespace = current_schema()::regnamespace AND NOT indisvalid"
                )
                assert (await cursor.fetchone())["n"] == 0


@pytest.mark.parametrize("attempt", range(3))
async def test_processes_setting_documents_up_together_all_build_the_indexes(attempt: int) -> None:
    with schema_url() as url:
        async with contextlib.AsyncExitStack() as stack:
            savers = [await stack.enter_async_context(open_checkpointer(url)) for _ in range(4)]
            results = await asyncio.gather(
                *(documents_for(s).get("probe", "none") for s in savers), return_exceptions=True
            )
        assert [r for r in results if r is not None] == []


async def test_a_schema_lock_held_by_a_stuck_process_is_warned_of_then_given_up_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(schema_lock, "WARN_AFTER_S", 0.2, raising=False)
    monkeypatch.setattr(schema_lock, "GIVE_UP_AFTER_S", 1.0, raising=False)
    with schema_url() as url, psycopg.connect(url, autocommit=True) as stuck:
        # A process hung mid set-up: it holds the schema's lock and never lets go.
        stuck.execute(
            "SELECT pg_advisory_lock(hashtext(%s || current_schema()))", (schema_lock._KEY,)
        )
        schema = url.rpartition("%3D")[2]
        with capture_logs() as logs, pytest.raises(ConfigError) as raised:
            await asyncio.wait_for(_start(url), timeout=10)  # not forever
    error = str(raised.value)
    assert "SKILLDESK_CHECKPOINT_URL" in error
    assert schema in error
    assert "pg_locks" in error
    assert "advisory" in error
    waiting = [e for e in logs if e["event"] == "schema.setup_waiting"]
    assert len(waiting) == 1
    assert waiting[0]["log_level"] == "warning"
    assert waiting[0]["schema"] == schema
    assert "another process" in waiting[0]["reason"]


async def test_a_search_path_naming_no_schema_stops_start_up_at_once_saying_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # current_schema() was NULL, so the lock (keyed by it) was never taken: start-up waited
    # the whole give-up time, then blamed "another process" holding it.
    monkeypatch.setattr(schema_lock, "GIVE_UP_AFTER_S", 5.0, raising=False)
    url = f"{POSTGRES}?options=-csearch_path%3Dno_such_schema_here"
    with pytest.raises(ConfigError) as raised:
        await asyncio.wait_for(_start(url), timeout=3)
    error = str(raised.value)
    assert "SKILLDESK_CHECKPOINT_URL" in error
    assert "no_such_schema_here" in error
    assert "names no schema that exists" in error


def _waiting_for_the_lock(stuck: psycopg.Connection[Any], name: str) -> bool:
    """Whether the process whose connections are named `name` polls the schema's lock."""
    row = stuck.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s"
        " AND query LIKE 'SELECT pg_try_advisory_lock%%'",
        (name,),
    ).fetchone()
    return row is not None and row[0] > 0


@pytest.mark.parametrize(
    ("sig", "status"),
    [(signal.SIGTERM, -signal.SIGTERM), (signal.SIGINT, 130)],
    ids=["SIGTERM", "SIGINT"],
)
def test_serve_told_to_stop_while_it_waits_for_the_schema_lock_stops_at_once(
    tmp_path: Path, sig: signal.Signals, status: int
) -> None:
    # uvicorn only noted the signal: start-up waited for the lock (up to 120 s), then failed.
    name = f"skilldesk-{uuid.uuid4().hex[:8]}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKILLDESK_")}
    (tmp_path / "skills").mkdir()
    env.update(
        SKILLDESK_SKILLS_DIR=str(tmp_path / "skills"),
        SKILLDESK_SKILLS_EMBEDDINGS="false",
        SKILLDESK_DATA_DIR=str(tmp_path / "data"),
        SKILLDESK_LOG_FORMAT="json",
    )
    with schema_url() as url, psycopg.connect(url, autocommit=True) as stuck:
        stuck.execute(
            "SELECT pg_advisory_lock(hashtext(%s || current_schema()))", (schema_lock._KEY,)
        )
        env["SKILLDESK_CHECKPOINT_URL"] = f"{url}&application_name={name}"
        serve = subprocess.Popen(
            [SKILLDESK, "serve", "--port", str(free_port())],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            deadline = time.monotonic() + 60
            while not _waiting_for_the_lock(stuck, name):
                assert serve.poll() is None, serve.communicate()[0]
                assert time.monotonic() < deadline, "serve never waited for the lock"
                time.sleep(0.05)
            serve.send_signal(sig)
            told = time.monotonic()
            output = serve.communicate(timeout=10)[0]
            took = time.monotonic() - told
        finally:
            if serve.poll() is None:
                serve.kill()
                serve.wait()
        left = stuck.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (name,)
        ).fetchone()
    assert took < 5, output
    assert serve.returncode == status, output  # as any stop of `skilldesk serve`
    assert "Traceback" not in output
    events = [json.loads(line).get("event") for line in output.splitlines() if line[:1] == "{"]
    assert "service.stopped_while_starting" in events, output
    assert "service.ready" not in events
    assert "Application startup failed. Exiting." not in events
    assert left == (0,)  # its connections, the one polling the lock too, closed
