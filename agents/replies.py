"""A model reply that asks for side effects is recorded before they run, and acted on again.

A side-effecting call's key holds its arguments (``runner.idempotency_key_of``), and the tool
loop runs inside one graph step: a run cut off after the call (a crash, a kill) answers the
resent message from the step's start, asks the model again, and a model that words the call
anew (a title, a description) makes another call with another key: the side effect twice.
So the reply is written to the call journal first, under its place in the turn (thread,
user message, node, task, the loop's instructions, round), and a run answering the same
message takes it from there instead of asking the model: the same calls, the same keys,
their recorded results. A reply asking only for lookups is not recorded (asking again is
harmless, and costs no write).
"""

from __future__ import annotations

import hashlib
import json

import structlog
from langchain_core.messages import AIMessage, message_to_dict, messages_from_dict

from agents.run import RunContext, answering_node
from agents.skills.meta import SkillTools
from agents.state.calls import Claim

log = structlog.get_logger(__name__)
TOOL = "(model reply)"  # the journal's tool column for these records


def reply_key(
    tools: SkillTools | None, ctx: RunContext, task_id: str | None, system: str, round_: int
) -> str | None:
    """The key of the loop's ``round_``-th reply in the turn; None where nothing is keyed
    (no skills, or a run without a thread or a turn: its calls are not keyed either)."""
    if tools is None or not (ctx.thread_id and ctx.turn_id):
        return None
    instructions = hashlib.sha256(system.encode()).hexdigest()
    place = f"{ctx.thread_id}|{ctx.turn_id}|{answering_node()}|{task_id}|{instructions}"
    return hashlib.sha256(f"reply|{place}|{round_}".encode()).hexdigest()[:32]


async def recorded(tools: SkillTools, key: str) -> AIMessage | None:
    """The reply recorded under ``key`` by an earlier run of the turn, if any."""
    record = await tools.skills.runner.journal.get(key)
    if record is None or record.status != "done" or not record.content:
        return None
    return _reply(record.content)


async def record(tools: SkillTools, ctx: RunContext, key: str, reply: AIMessage) -> AIMessage:
    """Record ``reply`` before its calls run; the reply to act on: this one, or the one
    another run of the same turn recorded first (one decision per place, whoever wins)."""
    journal = tools.skills.runner.journal
    claim = await journal.begin(key, thread_id=ctx.thread_id, run_id=ctx.run_id, tool=TOOL)
    if isinstance(claim, Claim):
        content = json.dumps(message_to_dict(reply), default=str)
        await journal.finish(claim, content, True)
        return reply
    if claim.status == "done" and claim.content:
        log.info("loop.reply_recorded_elsewhere", key=key)
        return _reply(claim.content) or reply
    return reply  # being recorded by another run this instant: its calls' keys decide


def _reply(content: str) -> AIMessage | None:
    message = messages_from_dict([json.loads(content)])[0]
    return message if isinstance(message, AIMessage) else None
