"""A long thread is summarised before routing: one summary call, the next expert reads the
summary and only the recent messages, every compressed message keeps its index and speaker,
nothing else in the state changes, and a failed summary leaves the turn answered."""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from agents.events import ErrorRaised, NodeStarted
from agents.memory.summaries import summarised_count
from agents.threads import RetentionOptions
from app.main import create_app
from app.services import Services, open_services
from tests.fakellm import FakeLLM, Reply, ToolCall
from tests.integration.conversation.kit import final, make_skills, turn

SUMMARY = "The user asked where order ORD1001 is [#0 user]; it had shipped [#2 tool]."


def settings_for(model_settings: Any, tmp_path: Path, **summary: Any) -> Any:
    return model_settings.model_copy(
        update={"skills_dir": make_skills(tmp_path / "skills"), **summary}
    )


@pytest.fixture
async def short(model_settings: Any, tmp_path: Path) -> AsyncIterator[Services]:
    """Summaries past 6 messages, keeping the last 2."""
    settings = settings_for(
        model_settings,
        tmp_path,
        summary_after_messages=6,
        summary_after_tokens=0,
        summary_keep=2,
    )
    async with open_services(settings) as opened:
        yield opened


def config(thread: str) -> Any:
    return {"configurable": {"thread_id": thread}}


async def test_a_long_thread_is_summarised_once_and_the_expert_reads_only_recent_messages(
    short: Services, fake_llm: FakeLLM
) -> None:
    thread = uuid.uuid4().hex
    fake_llm.script(
        Reply(tool_calls=[ToolCall("get_order", {"order_id": "ORD1001"})]),
        Reply(content="ORD1001 has shipped."),
    )
    await turn(short, "where is my order ORD1001?", thread)
    fake_llm.script(Reply(content="ORD1002 is being packed."))
    events = await turn(short, "where is my order ORD1002?", thread)
    assert not any(isinstance(e, NodeStarted) and e.node == "summarize" for e in events)
    assert len(fake_llm.scripted_views) == 3  # six messages: not over the threshold yet

    graph = short.conversations.graph
    structured = {"loaded_skills": ["holiday-calendar"], "pending_workflow": None}
    await graph.aupdate_state(config(thread), structured)
    before = await short.conversations.state(thread)

    fake_llm.script(Reply(content=SUMMARY), Reply(content="ORD1003 is on its way."))
    events = await turn(short, "where is my order ORD1003?", thread)
    assert final(events).message.content == "ORD1003 is on its way."
    assert [e.node for e in events if isinstance(e, NodeStarted)][:2] == ["summarize", "route"]

    summary_call, expert_call = fake_llm.scripted_views[3:]
    assert not summary_call.tools  # the summary request: one plain call
    compressed = "\n".join(m.text for m in summary_call.messages if m.role == "user")
    assert "where is my order ORD1001?" in compressed
    assert "ORD1001 has shipped." in compressed
    assert "ORD1002" not in compressed
    assert expert_call.system_contains(SUMMARY)
    said = [(m.role, m.text) for m in expert_call.messages if m.role != "system"]
    assert said == [
        ("user", "where is my order ORD1002?"),
        ("assistant", "ORD1002 is being packed."),
        ("user", "where is my order ORD1003?"),
    ]

    state = await short.conversations.state(thread)
    summary = state["summary"]
    assert summary["text"] == SUMMARY
    indexed = [(e["index"], e["speaker"]) for e in summary["entries"]]
    assert indexed == [(0, "user"), (1, "assistant"), (2, "tool"), (3, "assistant")]
    assert "get_order" in summary["entries"][1]["text"]  # the call, not just empty content
    assert all(m.content != SUMMARY for m in state["messages"])  # never a message
    assert next(m.content for m in state["messages"]) == "where is my order ORD1002?"
    assert state["loaded_skills"] == before["loaded_skills"] == ["holiday-calendar"]

    # The step itself wrote the summary, removed messages and counted usage; nothing else.
    history = [s async for s in graph.aget_state_history(config(thread))]
    after_step = next(s for s in history if s.next == ("route",) and s.values.get("summary"))
    for key in ("loaded_skills", "workspace", "pending_workflow", "route", "schema_version"):
        assert after_step.values.get(key) == before.get(key), key
    # The originals stay readable in the checkpoints before the step.
    older = [m.content for s in history for m in s.values.get("messages", [])]
    assert "where is my order ORD1001?" in older
    assert "ORD1001 has shipped." in older


LATER = "Orders ORD1001 to ORD1004 were asked about; all had shipped [#0-#7]."


async def six_turns(services: Services, fake_llm: FakeLLM, thread: str) -> None:
    """Six order questions: summarised at the fourth (messages 0-3) and the sixth (4-7)."""
    for n in range(1, 7):
        if n == 4:
            fake_llm.script(Reply(content=SUMMARY))
        if n == 6:
            fake_llm.script(Reply(content=LATER))
        fake_llm.script(Reply(content=f"ORD100{n} has shipped."))
        await turn(services, f"where is my order ORD100{n}?", thread)


async def test_the_next_summary_extends_the_previous_one_with_the_indices_that_follow(
    short: Services, fake_llm: FakeLLM
) -> None:
    thread = uuid.uuid4().hex
    later = LATER
    await six_turns(short, fake_llm, thread)
    second = fake_llm.scripted_views[-2]
    assert second.system_contains(SUMMARY)  # the previous summary is rewritten, not lost
    compressed = "\n".join(m.text for m in second.messages if m.role == "user")
    assert "ORD1003?" in compressed
    assert "ORD1004 has shipped." in compressed
    assert "ORD1001?" not in compressed  # already in the previous summary
    state = await short.conversations.state(thread)
    assert state["summary"]["text"] == later
    assert [e["index"] for e in state["summary"]["entries"]] == list(range(8))
    assert [e["speaker"] for e in state["summary"]["entries"]] == ["user", "assistant"] * 4
    assert [m.content for m in state["messages"]] == [
        "where is my order ORD1005?",
        "ORD1005 has shipped.",
        "where is my order ORD1006?",
        "ORD1006 has shipped.",
    ]


async def test_entries_past_the_bound_fold_into_a_count_by_speaker_and_indices_hold(
    model_settings: Any, tmp_path: Path, fake_llm: FakeLLM
) -> None:
    settings = settings_for(
        model_settings,
        tmp_path,
        summary_after_messages=6,
        summary_after_tokens=0,
        summary_keep=2,
        summary_entries=3,
    )
    thread = uuid.uuid4().hex
    async with open_services(settings) as services:
        await six_turns(services, fake_llm, thread)
        state = await services.conversations.state(thread)
        record = await services.threads.get(thread)
        kept = [i for i, _ in await services.threads.summarised(thread, 8)]
        # Retention may bound the originals kept too, a whole batch at a time.
        services.threads.retention = RetentionOptions(keep_checkpoints=0, keep_summarised=4)
        report = await services.threads.prune()
        pruned = [i for i, _ in await services.threads.summarised(thread, 8)]
    assert kept == list(range(8))
    assert report.summarised_deleted == 4
    assert pruned == [4, 5, 6, 7]
    summary = state["summary"]
    # Eight compressed messages: the latest three keep their entry, five are counted.
    assert [(e["index"], e["speaker"]) for e in summary["entries"]] == [
        (5, "assistant"),
        (6, "user"),
        (7, "assistant"),
    ]
    assert summary["entries"][0]["text"] == "ORD1003 has shipped."
    assert summary["folded"] == {"count": 5, "speakers": {"user": 3, "assistant": 2}}
    assert summary["text"] == LATER
    # Counts still take in every summarised message.
    assert summarised_count(summary) == 8
    assert len(state["messages"]) == 4
    assert record["messages"] == 12


async def test_a_failed_summary_call_leaves_the_turn_answered_and_the_thread_whole(
    short: Services, fake_llm: FakeLLM
) -> None:
    thread = uuid.uuid4().hex
    for n in (1, 2, 3):
        fake_llm.script(Reply(content=f"ORD100{n} has shipped."))
        await turn(short, f"where is my order ORD100{n}?", thread)
    fake_llm.script(
        *[Reply(status=500, error_message="overloaded") for _ in range(3)],  # retries: 2
        Reply(content="ORD1004 has shipped."),
    )
    events = await turn(short, "where is my order ORD1004?", thread)
    assert final(events).message.content == "ORD1004 has shipped."
    errors = [e for e in events if isinstance(e, ErrorRaised)]
    assert [e.code for e in errors] == ["summary_failed"]
    state = await short.conversations.state(thread)
    assert state.get("summary") is None
    assert len(state["messages"]) == 8
    # The expert read the whole history, as without summaries.
    assert len([m for m in fake_llm.scripted_views[-1].messages if m.role == "user"]) == 4


async def test_the_token_threshold_summarises_a_thread_of_few_long_messages(
    model_settings: Any, tmp_path: Path, fake_llm: FakeLLM
) -> None:
    settings = settings_for(
        model_settings,
        tmp_path,
        summary_after_messages=100,
        summary_after_tokens=1000,
        summary_keep=2,
    )
    notes = "The parcel was left at the back gate next to the loading dock. " * 20  # ~340
    thread = uuid.uuid4().hex
    async with open_services(settings) as services:
        fake_llm.script(Reply(content="Noted for ORD1001."))
        await turn(services, f"where is my order ORD1001? {notes}", thread)
        fake_llm.script(Reply(content="Noted for ORD1002."))
        await turn(services, f"where is my order ORD1002? {notes}", thread)
        assert not (await services.conversations.state(thread)).get("summary")
        fake_llm.script(Reply(content=SUMMARY), Reply(content="ORD1003 has shipped."))
        await turn(services, f"where is my order ORD1003? {notes}", thread)
        state = await services.conversations.state(thread)
    assert fake_llm.scripted_views[-1].system_contains(SUMMARY)  # whichever node answered
    assert [(e["index"], e["speaker"]) for e in state["summary"]["entries"]] == [
        (0, "user"),
        (1, "assistant"),
    ]
    assert len(state["messages"]) == 4


async def test_without_a_model_nothing_is_summarised_and_nothing_is_reported(
    make_settings: Any, tmp_path: Path
) -> None:
    settings = make_settings(summary_after_messages=2, summary_keep=1)
    thread = uuid.uuid4().hex
    async with open_services(settings) as services:
        for text in ("hello", "hello again", "and again"):
            events = await turn(services, text, thread)
            assert not [e for e in events if isinstance(e, ErrorRaised)]
        state = await services.conversations.state(thread)
    assert state.get("summary") is None
    assert len(state["messages"]) == 6


@pytest.fixture
def client(model_settings: Any, tmp_path: Path) -> Iterator[TestClient]:
    settings = settings_for(
        model_settings, tmp_path, summary_after_messages=4, summary_after_tokens=0, summary_keep=2
    )
    with TestClient(create_app(settings)) as test_client:
        yield test_client


def test_the_thread_says_how_many_earlier_messages_are_summarised(
    client: TestClient, fake_llm: FakeLLM
) -> None:
    for n in (1, 2):
        fake_llm.script(Reply(content=f"ORD100{n} has shipped."))
        response = client.post(
            "/v1/threads/t-sum/runs/stream", json={"message": f"where is my order ORD100{n}?"}
        )
        assert response.status_code == 200
    body = client.get("/v1/threads/t-sum").json()
    assert body["summarised_messages"] == 0
    assert [m["index"] for m in body["messages"]] == [0, 1, 2, 3]
    fake_llm.script(Reply(content=SUMMARY), Reply(content="ORD1003 has shipped."))
    client.post("/v1/threads/t-sum/runs/stream", json={"message": "where is my order ORD1003?"})
    active = client.get("/v1/threads/t-sum", params={"summarised": False}).json()
    assert active["summarised_messages"] == 2
    assert [m["index"] for m in active["messages"]] == [2, 3, 4, 5]
    assert active["messages"][0]["content"] == "where is my order ORD1002?"
    # By default the summarised originals come first, marked, whatever retention keeps.
    threads = client.app.state.services.threads  # type: ignore[attr-defined]
    threads.retention = RetentionOptions(keep_checkpoints=1)
    assert client.portal is not None
    client.portal.call(threads.prune)  # nothing from before the summary is left
    whole = client.get("/v1/threads/t-sum").json()
    assert [(m["index"], m["content"], m.get("summarised")) for m in whole["messages"]] == [
        (0, "where is my order ORD1001?", True),
        (1, "ORD1001 has shipped.", True),
        (2, "where is my order ORD1002?", None),
        (3, "ORD1002 has shipped.", None),
        (4, "where is my order ORD1003?", None),
        (5, "ORD1003 has shipped.", None),
    ]
    assert whole["summarised_messages"] == 2


async def test_a_cut_on_a_tool_result_moves_back_to_its_call(
    model_settings: Any, tmp_path: Path, fake_llm: FakeLLM
) -> None:
    settings = settings_for(
        model_settings,
        tmp_path,
        summary_after_messages=6,
        summary_after_tokens=0,
        summary_keep=3,
    )
    thread = uuid.uuid4().hex
    async with open_services(settings) as services:
        fake_llm.script(
            Reply(tool_calls=[ToolCall("get_order", {"order_id": "ORD1001"}, id="c1")]),
            Reply(tool_calls=[ToolCall("get_order", {"order_id": "ORD1002"}, id="c2")]),
            Reply(content="Both have shipped."),
        )
        await turn(services, "where are my orders ORD1001 and ORD1002?", thread)
        # Six messages; the next one makes seven: keeping 3 would cut on c2's result.
        fake_llm.script(Reply(content=SUMMARY), Reply(content="ORD1003 has shipped."))
        await turn(services, "where is my order ORD1003?", thread)
        state = await services.conversations.state(thread)
    expert_call = fake_llm.scripted_views[-1]
    said = [m for m in expert_call.messages if m.role != "system"]
    assert [m.role for m in said] == ["assistant", "tool", "assistant", "user"]
    assert said[0].tool_calls[0].id == said[1].tool_call_id == "c2"
    indexed = [(e["index"], e["speaker"]) for e in state["summary"]["entries"]]
    assert indexed == [(0, "user"), (1, "assistant"), (2, "tool")]


async def test_the_summary_profile_writes_the_summary_and_the_default_answers(
    make_settings: Any,
    tmp_path: Path,
    fake_llm: FakeLLM,
    backup_llm: FakeLLM,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FAKE_KEY", "sk-fake")
    models = tmp_path / "models.yaml"
    models.write_text(
        f"""
default: main
profiles:
  main:
    model: openai/fake-model
    api_base: {fake_llm.base_url}
    api_key_env: FAKE_KEY
  cheap:
    model: openai/small-model
    api_base: {backup_llm.base_url}
    api_key_env: FAKE_KEY
""",
        encoding="utf-8",
    )
    settings = make_settings(
        models_file=models,
        skills_dir=make_skills(tmp_path / "skills"),
        summary_after_messages=4,
        summary_after_tokens=0,
        summary_keep=2,
        summary_model="cheap",
    )
    thread = uuid.uuid4().hex
    async with open_services(settings) as services:
        for n in (1, 2):
            fake_llm.script(Reply(content=f"ORD100{n} has shipped."))
            await turn(services, f"where is my order ORD100{n}?", thread)
        backup_llm.script(Reply(content=SUMMARY))
        fake_llm.script(Reply(content="ORD1003 has shipped."))
        events = await turn(services, "where is my order ORD1003?", thread)
        state = await services.conversations.state(thread)
    assert final(events).message.content == "ORD1003 has shipped."
    (summary_call,) = backup_llm.requests
    assert summary_call["model"] == "small-model"
    assert "where is my order ORD1001?" in str(summary_call["messages"])
    assert state["summary"]["text"] == SUMMARY
    assert fake_llm.requests[-1]["model"] == "fake-model"
    assert SUMMARY in fake_llm.requests[-1]["messages"][0]["content"]


class FailingStore:
    """A document store whose every write fails (a full disk, a dropped connection)."""

    async def put(self, *args: Any, **kwargs: Any) -> None:
        raise sqlite3.OperationalError("database or disk is full")


async def test_originals_that_cannot_be_kept_leave_the_thread_unsummarised(
    short: Services, fake_llm: FakeLLM
) -> None:
    thread = uuid.uuid4().hex
    assert short.threads.transcript is not None
    short.threads.transcript.documents = FailingStore()  # type: ignore[assignment]
    for n in (1, 2, 3):
        fake_llm.script(Reply(content=f"ORD100{n} has shipped."))
        await turn(short, f"where is my order ORD100{n}?", thread)
    fake_llm.script(Reply(content=SUMMARY), Reply(content="ORD1004 has shipped."))
    events = await turn(short, "where is my order ORD1004?", thread)
    assert final(events).message.content == "ORD1004 has shipped."
    [error] = [e for e in events if isinstance(e, ErrorRaised)]
    assert error.code == "summary_failed"
    assert "disk is full" in error.message
    state = await short.conversations.state(thread)
    assert state.get("summary") is None
    assert len(state["messages"]) == 8  # nothing left the active history unkept
