"""A tool loop that can make side effects records its model replies before their calls run,
and a run that answers the same message again acts on them instead of asking the model anew.

A side-effecting call's key holds its arguments (``runner.idempotency_key_of``), and the tool
loop runs inside one graph step: a run cut off after the call (a crash, a kill) answers the
resent message from the step's start, asks the model again, and a model that words the call
anew (a title, a description) makes another call with another key: the side effect twice.
So each reply that asks for tools is written to the call journal first, under its place in
the turn (thread, user message, node, task, the loop's instructions, the attempt, the round),
and a run answering the message again replays the replies recorded, round by round, asking
the model only from the first round that has none. Every tool-asking reply of such a loop is
recorded, lookups too: replayed rounds must be the ones that ran, or a recorded call would be
replayed after other rounds than its own. Once the turn is answered (its last checkpoint
written) no run answers it again, and its records are deleted (``forget``). A loop whose
skills change nothing records nothing (asking the model again is harmless there, and costs
no write).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

import structlog
from langchain_core.messages import AIMessage, message_to_dict, messages_from_dict

from agents.run import Recorded, RunContext, answering_node
from agents.skills.meta import Scope, SkillTools
from agents.state.calls import CallJournal, Claim

log = structlog.get_logger(__name__)
TOOL = "(model reply)"  # the journal's tool column for these records


class Replies:
    """The recorded replies of one tool loop (``recording`` False: none are kept or read)."""

    def __init__(
        self,
        tools: SkillTools | None,
        scope: Scope,
        ctx: RunContext,
        task_id: str | None,
        system: str,
    ) -> None:
        self.ctx = ctx
        self.journal: CallJournal | None = None
        self._place = ""
        self._replaying = ctx.again  # until a round has no recorded reply
        self._keys: list[str] = []  # the records this loop wrote or replayed
        if tools is None or not (ctx.thread_id and ctx.turn_id):
            return  # its calls are not keyed either
        reach = None if scope.loadable is None else {*scope.loaded, *scope.loadable}
        if not tools.skills.registry.changes_anything(reach):
            return
        self.journal = tools.skills.runner.journal
        instructions = hashlib.sha256(system.encode()).hexdigest()
        node, attempt = answering_node(), ctx.attempt
        self._place = f"{ctx.thread_id}|{ctx.turn_id}|{node}|{task_id}|{attempt}|{instructions}"
        ctx.recorded.append(self)  # forgotten once the turn is answered

    @property
    def recording(self) -> bool:
        """Whether this loop's replies are recorded (its skills can make side effects)."""
        return self.journal is not None

    def key(self, round_: int) -> str:
        """The journal key of the loop's reply in round ``round_``."""
        return hashlib.sha256(f"reply|{self._place}|{round_}".encode()).hexdigest()[:32]

    async def recorded(self, round_: int) -> AIMessage | None:
        """The reply an earlier run of the turn recorded for round ``round_``; None from the
        first round that has none on (what follows it was not decided after this round)."""
        if self.journal is None or not self._replaying:
            return None
        record = await self.journal.get(self.key(round_))
        reply = _reply(record.content) if record and record.status == "done" else None
        if reply is None:
            self._replaying = False
        else:
            self._keys.append(self.key(round_))
        return reply

    async def record(self, round_: int, reply: AIMessage) -> None:
        """Record ``reply`` (asking for tools) before its calls run."""
        if self.journal is None:
            return
        ctx, key = self.ctx, self.key(round_)
        # A record begun and never finished (a crash between the two writes) is taken over.
        claim = await self.journal.begin(
            key, thread_id=ctx.thread_id, run_id=ctx.run_id, tool=TOOL, silent_s=0.0
        )
        self._keys.append(key)
        if isinstance(claim, Claim):
            await self.journal.finish(claim, json.dumps(message_to_dict(reply), default=str), True)
        else:  # asked afresh where a reply stands: one replay missed it; this one decides
            log.warning("loop.reply_recorded_already", key=key, round=round_)

    async def forget(self) -> None:
        """Delete this loop's records: called once its turn is answered (its last checkpoint
        written), when no run will answer the message again."""
        if self.journal is not None and self._keys:
            keys, self._keys = self._keys, []
            await self.journal.forget(keys)


async def forget_all(loops: Sequence[Recorded]) -> None:
    """The records of ``loops`` deleted, once no run will answer what they answered again:
    a turn answered (a chat turn that failed or was cancelled keeps them, for the run that
    answers the message again), a workflow run stored as ended or waiting at an approval
    (its steps checkpointed). Should deleting fail they stay, said in the log (harmless: a
    few KB each)."""
    for loop in loops:
        try:
            await loop.forget()
        except Exception as exc:  # the turn is answered whatever the journal says
            log.warning("loop.replies_not_forgotten", error=f"{type(exc).__name__}: {exc}")


def _reply(content: str | None) -> AIMessage | None:
    """The recorded reply; None (asked anew) for a record that is not one (written by
    another version, or damaged), said in the log."""
    if not content:
        return None
    try:
        message = messages_from_dict([json.loads(content)])[0]
    except (ValueError, KeyError, TypeError, IndexError) as exc:
        log.warning("loop.reply_unreadable", error=f"{type(exc).__name__}: {exc}")
        return None
    return message if isinstance(message, AIMessage) else None
