"""`skilldesk threads ...` on the store the service wrote, through its entry point."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from app.main import create_app
from tests.fakellm import FakeLLM, Reply
from tests.integration.threads.conftest import say

SKILLDESK = str(Path(sys.executable).with_name("skilldesk"))


def cli(settings: Any, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKILLDESK_")}
    env.update(
        {
            "SKILLDESK_DATA_DIR": str(settings.data_dir),
            "SKILLDESK_SKILLS_DIR": str(settings.skills_dir),
            "SKILLDESK_CHECKPOINT_URL": settings.checkpoint_url,
            "SKILLDESK_WORKFLOWS_DIR": str(settings.data_dir / "no-workflows"),
        }
    )
    return subprocess.run(
        [SKILLDESK, "threads", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        input=stdin,
    )


def test_list_show_history_fork_prune_and_delete(thread_settings: Any, fake_llm: FakeLLM) -> None:
    fake_llm.script(Reply(content="Blue noted."), Reply(content="Blue."), Reply(content="Hi."))
    with TestClient(create_app(thread_settings)) as client:
        say(client, "colours", "My colour is blue.")
        say(client, "colours", "What is my colour?")
        say(client, "other", "Hello")

    listed = cli(thread_settings, "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert [t["thread_id"] for t in json.loads(listed.stdout)] == ["other", "colours"]
    text = cli(thread_settings, "list").stdout
    assert "colours" in text
    assert "My colour is blue." in text

    shown = json.loads(cli(thread_settings, "show", "colours", "--json").stdout)
    assert [m["content"] for m in shown["active"]][-1] == "Blue."
    assert "What is my colour?" in cli(thread_settings, "show", "colours").stdout

    history = json.loads(cli(thread_settings, "history", "colours", "--json").stdout)
    first_turn = next(h for h in history if h["messages"] == 2 and h["next"] == [])
    forked = cli(
        thread_settings, "fork", "colours", "--checkpoint", first_turn["checkpoint_id"], "--to", "b"
    )
    assert forked.returncode == 0, forked.stderr
    # QA: a fork kept its source's exact title: the two looked alike in every listing.
    assert "-> b  My colour is blue. (fork)" in forked.stdout
    assert json.loads(cli(thread_settings, "show", "b", "--json").stdout)["messages"] == 2
    by_index = cli(
        thread_settings, "fork", "colours", "--before-message", "2", "--to", "c", "--edit", "--json"
    )
    assert by_index.returncode == 0, by_index.stderr
    made = json.loads(by_index.stdout)
    assert made["forked_from"]["checkpoint_id"] == first_turn["checkpoint_id"]
    assert made["title"] == "My colour is blue. (edited)"
    named = cli(thread_settings, "fork", "colours", "--before-message", "2", "--title", "Mine")
    assert named.returncode == 0, named.stderr
    assert named.stdout.endswith("  Mine\n")
    refused_title = cli(thread_settings, "fork", "colours", "--before-message", "2", "--title", " ")
    assert refused_title.returncode == 2
    assert "--title" in refused_title.stderr
    bad = cli(thread_settings, "fork", "colours", "--checkpoint", "nope")
    assert bad.returncode == 1
    assert "no checkpoint 'nope'" in bad.stderr

    dry = json.loads(cli(thread_settings, "prune", "--dry-run", "--keep", "2", "--json").stdout)
    assert dry["dry_run"] is True
    assert dry["checkpoints_deleted"] > 0
    before = len(json.loads(cli(thread_settings, "history", "colours", "--json").stdout))
    done = json.loads(cli(thread_settings, "prune", "--keep", "2", "--json").stdout)
    assert done["checkpoints_deleted"] == dry["checkpoints_deleted"]
    assert before > 2
    assert len(json.loads(cli(thread_settings, "history", "colours", "--json").stdout)) == 2

    refused = cli(thread_settings, "delete", "other", stdin="n\n")
    assert refused.returncode != 0
    assert cli(thread_settings, "delete", "other", "--yes").returncode == 0
    remaining = [t["thread_id"] for t in json.loads(cli(thread_settings, "list", "--json").stdout)]
    assert len(remaining) == 4  # the one named "Mine" with an id made up
    assert {"b", "c", "colours"} < set(remaining)
    missing = cli(thread_settings, "show", "other")
    assert missing.returncode == 1
    assert "There is no thread 'other'" in missing.stderr


def test_a_fork_from_no_checkpoint_names_the_history_command_not_the_http_route(
    thread_settings: Any, fake_llm: FakeLLM
) -> None:
    # QA: `threads fork qa-t1 --checkpoint nope` said "GET /v1/threads/qa-t1/history lists
    # them": on the command line, the command that lists them.
    fake_llm.script(Reply(content="Noted."))
    with TestClient(create_app(thread_settings)) as client:
        say(client, "qa-t1", "Remember ORD1007.")
    for how in (["--checkpoint", "nope"], ["--before-message", "1"]):  # 1: the answer
        refused = cli(thread_settings, "fork", "qa-t1", *how)
        assert refused.returncode == 1, refused.stdout
        assert "`skilldesk threads history qa-t1` lists" in refused.stderr
        assert "/v1/" not in refused.stderr


def test_show_numbers_messages_as_the_api_does_when_a_summary_has_folded_entries(
    thread_settings: Any, fake_llm: FakeLLM
) -> None:
    fake_llm.script(Reply(content="Noted."))
    summary = {
        "text": "Earlier, the user asked about orders.",
        "entries": [{"index": 5, "speaker": "assistant", "text": "ORD1003 has shipped."}],
        "folded": {"count": 5, "speakers": {"user": 3, "assistant": 2}},
    }
    with TestClient(create_app(thread_settings)) as client:
        say(client, "folded", "Remember ORD1007.")
        services = client.app.state.services  # type: ignore[attr-defined]
        client.portal.call(services.conversations.update, "folded", {"summary": summary})  # type: ignore[union-attr]
        api = client.get("/v1/threads/folded", params={"summarised": False}).json()
    shown = cli(thread_settings, "show", "folded", "--json")
    assert shown.returncode == 0, shown.stderr
    found = json.loads(shown.stdout)
    assert [m["index"] for m in found["active"]] == [m["index"] for m in api["messages"]]
    assert [m["index"] for m in found["active"]] == [6, 7]
    text = cli(thread_settings, "show", "folded").stdout
    assert "[summary of 6 earlier messages]" in text
    assert "     6 human" in text


def test_data_dir_option_reads_the_store_the_service_keeps_there(
    model_settings: Any, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    """No store in the environment: `--data-dir` names the folder of the default SQLite
    file, as for `skilldesk workflows` and `skilldesk skills`."""
    data = tmp_path / "elsewhere"
    settings = model_settings.model_copy(
        update={"checkpoint_url": "", "data_dir": data, "retention_interval_s": 0}
    )
    fake_llm.script(Reply(content="Hi."))
    with TestClient(create_app(settings)) as client:
        say(client, "kept-here", "Hello")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKILLDESK_")}
    env["SKILLDESK_SKILLS_DIR"] = str(settings.skills_dir)

    def threads(*args: str) -> subprocess.CompletedProcess[str]:
        command = [SKILLDESK, "threads", *args]
        return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)

    listed = threads("list", "--json", "--data-dir", str(data))
    assert listed.returncode == 0, listed.stderr
    assert [t["thread_id"] for t in json.loads(listed.stdout)] == ["kept-here"]
    shown = threads("show", "kept-here", "--json", "--data-dir", str(data))
    assert json.loads(shown.stdout)["active"][-1]["content"] == "Hi."
    # QA: a folder that holds no store (a mistyped --data-dir) listed "no threads" and was
    # made, with a new, empty store in it that no service reads.
    elsewhere = threads("list", "--json", "--data-dir", str(tmp_path / "empty"))
    assert elsewhere.returncode == 2, elsewhere.stdout
    assert elsewhere.stderr.startswith("skilldesk: configuration error: the data folder ")
    assert f"{tmp_path / 'empty'} (--data-dir / SKILLDESK_DATA_DIR) does not exist" in (
        elsewhere.stderr
    )
    assert not (tmp_path / "empty").exists()


def test_show_counts_the_messages_the_thread_holds_not_those_its_record_last_counted(
    thread_settings: Any, fake_llm: FakeLLM
) -> None:
    # QA: the record counts a thread's messages when a run ends: a thread whose run is under
    # way, or was cut off by a crash, showed the count from before beside the messages its
    # run stored.
    import asyncio

    from app.services import open_services

    fake_llm.script(Reply(content="Hi."))
    with TestClient(create_app(thread_settings)) as client:
        say(client, "cut", "Hello?")

    async def as_a_crash_leaves_it() -> None:
        async with open_services(thread_settings) as services:
            await services.threads.records.update("cut", messages=0, status="running")

    asyncio.run(as_a_crash_leaves_it())
    shown = cli(thread_settings, "show", "cut", "--json")
    assert shown.returncode == 0, shown.stderr
    found = json.loads(shown.stdout)
    assert [m["content"] for m in found["active"]] == ["Hello?", "Hi."]
    assert found["messages"] == 2
    assert "2 messages)" in cli(thread_settings, "show", "cut").stdout


def test_show_all_prints_the_summarised_messages_with_their_indexes(
    thread_settings: Any, fake_llm: FakeLLM
) -> None:
    # QA: `threads show` printed "[summary of 2 earlier messages]" and no way to read them, nor
    # the index to fork before one of them.
    summarising = thread_settings.model_copy(
        update={"summary_after_messages": 4, "summary_after_tokens": 0, "summary_keep": 2}
    )
    with TestClient(create_app(summarising)) as client:
        for n in (1, 2, 3):
            if n == 3:
                fake_llm.script(Reply(content="The user asked about orders 1 and 2 [#0 user]."))
            fake_llm.script(Reply(content=f"Order {n} shipped."))
            say(client, "long", f"Where is order {n}?")

    active = [
        "  [active messages]",
        "     2 human            Where is order 2?",
        "     3 ai               Order 2 shipped.",
        "     4 human            Where is order 3?",
        "     5 ai               Order 3 shipped.",
    ]
    plain = cli(thread_settings, "show", "long").stdout.splitlines()
    assert plain[1:] == ["  [summary of 2 earlier messages] (--all shows them)", *active[1:]]
    every = cli(thread_settings, "show", "long", "--all")
    assert every.returncode == 0, every.stderr
    assert every.stdout.splitlines()[1:] == [
        "  [summary of 2 earlier messages] the model reads it instead of these:",
        "     0 human            Where is order 1?",
        "     1 ai               Order 1 shipped.",
        *active,
    ]
    found = json.loads(cli(thread_settings, "show", "long", "--all", "--json").stdout)
    assert found["summarised"] == [
        {"index": 0, "role": "human", "content": "Where is order 1?", "name": None},
        {"index": 1, "role": "ai", "content": "Order 1 shipped.", "name": None},
    ]
    assert [m["index"] for m in found["active"]] == [2, 3, 4, 5]
    assert "summarised" not in json.loads(cli(thread_settings, "show", "long", "--json").stdout)

    # Originals not kept (summarised before they were, or let go by retention): where they
    # were is said, the summary stands for them.
    import asyncio

    from app.services import open_services

    async def forget_the_originals() -> None:
        async with open_services(thread_settings, background=False) as services:
            await services.threads.transcript.delete_thread("long")

    asyncio.run(forget_the_originals())
    gone = cli(thread_settings, "show", "long", "--all").stdout.splitlines()
    assert gone[2:4] == ["   0-1 (not kept: only the summary stands for them)", active[0]]
