"""Model replies of a loop whose skills make side effects are recorded before their calls
run, and a run answering the same message again replays them round by round."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage

from agents.errors import ModelError
from agents.loop import LoopResult, run_tool_loop
from agents.models import ModelGateway
from agents.prompts import Prompts
from agents.replies import Replies
from agents.run import RunContext
from agents.skills.meta import Scope, SkillTools
from agents.skills.service import SkillService, SkillsOptions
from agents.state.calls import MemoryCallJournal
from tests.fakellm import FakeLLM, Reply, RequestView, ToolCall
from tests.skillkit import tool, write_skill

HANDLER = """
import json
from pathlib import Path

def lookup(context):
    return {"open": 1}

def create(title, context):
    with open(Path(context.data_dir) / "tickets.jsonl", "a") as out:
        out.write(json.dumps({"title": title, "key": context.idempotency_key}) + "\\n")
    return {"ticket": title}
"""


@pytest.fixture
def tools(tmp_path: Path) -> SkillTools:
    write_skill(
        tmp_path / "skills",
        "desk",
        config={
            "isolation": "thread",
            "tools": [
                tool("lookup", "handler:lookup"),
                {
                    **tool("create", "handler:create", {"title": {"type": "string"}}, ["title"]),
                    "side_effects": True,
                },
            ],
        },
        handler=HANDLER,
    )
    options = SkillsOptions(tmp_path / "skills", tmp_path / "data", embeddings=False)
    service = SkillService(options)
    service.registry.reload()
    service.runner.journal = MemoryCallJournal()
    return SkillTools(service, Prompts())


async def _loop(tools: SkillTools, model_settings: Any, again: bool) -> LoopResult:
    gateway = ModelGateway(model_settings.models())
    try:
        ctx = RunContext(thread_id="t1", run_id="r", turn_id="m1", again=again)
        return await _run(tools, gateway, ctx)
    finally:
        await gateway.aclose()


async def _run(tools: SkillTools, gateway: ModelGateway, ctx: RunContext) -> LoopResult:
    return await run_tool_loop(
        gateway=gateway,
        prompts=Prompts(),
        tools=tools,
        system="You file tickets.",
        history=[HumanMessage("file a ticket for the pump seal", id="m1")],
        scope=Scope(loaded=["desk"], loadable={"desk"}),
        ctx=ctx,
        config={},
        max_rounds=5,
    )


def _tickets(tmp_path: Path) -> list[dict[str, Any]]:
    path = tmp_path / "data" / "skills" / "desk" / "tickets.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


async def test_a_run_again_replays_every_recorded_round_then_asks_the_model(
    tools: SkillTools, model_settings: Any, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    # Found by the review: only side-effecting replies were recorded, so the lookup round
    # was asked anew; a model that then called create at once (worded otherwise) made a
    # second ticket, and the recorded create was replayed after it as well.
    fake_llm.script(
        Reply(tool_calls=[ToolCall("lookup", {}, id="a")]),
        Reply(tool_calls=[ToolCall("create", {"title": "Pump seal"}, id="b")]),
        *[Reply(status=500)] * 3,  # the run is cut off here
    )
    with pytest.raises(ModelError):
        await _loop(tools, model_settings, again=False)
    assert [t["title"] for t in _tickets(tmp_path)] == ["Pump seal"]
    asked = len(fake_llm.requests)

    def answer(view: RequestView) -> Reply:  # asked afresh, the model words it anew
        if any(m.role == "tool" and m.tool_name == "create" for m in view.messages):
            return Reply(content="Filed.")
        return Reply(tool_calls=[ToolCall("create", {"title": "Seal of pump P-7"}, id="c")])

    fake_llm.script(answer)
    result = await _loop(tools, model_settings, again=True)
    assert result.answer.text == "Filed."
    assert len(fake_llm.requests) == asked + 1  # rounds 0 and 1 replayed, round 2 asked
    assert [t["title"] for t in _tickets(tmp_path)] == ["Pump seal"]
    calls = [c["args"] for m in result.messages for c in getattr(m, "tool_calls", [])]
    assert calls == [{}, {"title": "Pump seal"}]


async def test_the_records_are_kept_while_the_turn_is_unanswered_then_forgotten(
    tools: SkillTools, model_settings: Any, fake_llm: FakeLLM
) -> None:
    journal = tools.skills.runner.journal
    assert isinstance(journal, MemoryCallJournal)
    fake_llm.script(
        Reply(tool_calls=[ToolCall("create", {"title": "Pump seal"}, id="b")]),
        *[Reply(status=500)] * 3,  # the run is cut off here
    )
    gateway = ModelGateway(model_settings.models())
    try:
        first = RunContext(thread_id="t1", run_id="r1", turn_id="m1")
        with pytest.raises(ModelError):
            await _run(tools, gateway, first)
        [loop] = first.recorded
        assert isinstance(loop, Replies)
        reply, call = loop.key(0), *(k for k in journal.records if k != loop.key(0))
        assert journal.records[reply].status == "done"  # kept for the run again
        assert journal.records[call].status == "done"

        fake_llm.script(Reply(content="Filed."))
        again = RunContext(thread_id="t1", run_id="r2", turn_id="m1", again=True)
        result = await _run(tools, gateway, again)
    finally:
        await gateway.aclose()
    assert result.answer.text == "Filed."
    for loop in again.recorded:  # the turn answered: the runner forgets what it recorded
        await loop.forget()
    assert list(journal.records) == [call]  # the replayed reply's record is gone, not the call's


async def test_a_loop_whose_skills_change_nothing_records_nothing(
    tmp_path: Path, model_settings: Any, fake_llm: FakeLLM
) -> None:
    write_skill(
        tmp_path / "skills",
        "lookups",
        config={"isolation": "thread", "tools": [tool("lookup", "handler:lookup")]},
        handler=HANDLER,
    )
    options = SkillsOptions(tmp_path / "skills", tmp_path / "data", embeddings=False)
    service = SkillService(options)
    service.registry.reload()
    journal = MemoryCallJournal()
    service.runner.journal = journal
    fake_llm.script(Reply(tool_calls=[ToolCall("lookup", {}, id="a")]), Reply(content="One."))
    gateway = ModelGateway(model_settings.models())
    result = await run_tool_loop(
        gateway=gateway,
        prompts=Prompts(),
        tools=SkillTools(service, Prompts()),
        system="You look things up.",
        history=[HumanMessage("how many?", id="m1")],
        scope=Scope(loaded=["lookups"], loadable={"lookups"}),
        ctx=RunContext(thread_id="t1", run_id="r", turn_id="m1"),
        config={},
        max_rounds=5,
    )
    await gateway.aclose()
    assert result.answer.text == "One."
    assert journal.records == {}


def test_a_record_that_is_not_a_reply_is_asked_anew_not_a_crash() -> None:
    from agents.replies import _reply

    assert _reply('{"type": "ai", "data": {"content": "hi"}}') is not None
    assert _reply("{not json") is None
    assert _reply('{"no": "type"}') is None
    assert _reply('{"type": "human", "data": {"content": "hi"}}') is None
