"""Workflows from chat: a message the router sends to a workflow gives its inputs (a regular
expression, or the model through function calling); an input it does not give is asked for,
and the thread's next message fills it ("cancel" ends it); the run's events join the turn's,
and its end (done, waiting for an approval, failed) is the answer."""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, NamedTuple

from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.runnables import RunnableConfig

from agents.errors import KeyReused, ModelError, RunStatusConflict, SkilldeskError
from agents.events import Event, from_custom
from agents.models import ModelGateway
from agents.models.structured import forced_call, function_tool
from agents.prompts import Prompts
from agents.run import RunContext, emit
from agents.state.records import ThreadRecords
from agents.state.schema import add_usage, usage_since
from agents.state.spend import SpendLedger
from agents.workflows.engine import WorkflowEngine, keyed_run_id
from agents.workflows.inputs import check_inputs, convert_all
from agents.workflows.records import FINAL, LAST_EVENTS
from agents.workflows.spec import WorkflowSpec

CANCEL = re.compile(r"^\s*(cancel|stop|never ?mind|abort|取消)\W*$", re.IGNORECASE)
_SETTLE_S = 0.5  # how often a turn looks at the run it began, resumed elsewhere


# Writes a message into a thread between runs (``Conversations.post``).
Post = Callable[[str, BaseMessage, Sequence[Event], float, dict[str, int]], Awaitable[None]]


class WorkflowAnswer(NamedTuple):
    """A chat turn's answer from a workflow: the reply, what the thread keeps pending (None:
    nothing), and the turn's model usage (its inputs taken by the model, the run's calls)."""

    reply: str
    pending: dict[str, Any] | None
    usage: dict[str, int]


class WorkflowTurns:
    """Answers the chat turns the router gives to workflows.

    Args:
        engine: Runs the workflows (its ``workflows`` finds them by name).
        gateway: For inputs the model takes from the message.
        prompts: The replies the service writes.
        spend: Where the model calls a run makes after an approval count against the day of
            whoever started it (the run's user, else its thread's owner in ``records``).
        records: The threads' records (a run started in a thread is recorded as its owner's).
    """

    def __init__(
        self,
        engine: WorkflowEngine,
        gateway: ModelGateway,
        prompts: Prompts,
        spend: SpendLedger | None = None,
        records: ThreadRecords | None = None,
    ) -> None:
        self.engine = engine
        self.gateway = gateway
        self.prompts = prompts
        self.spend = spend
        self.records = records

    async def answer(
        self,
        name: str,
        text: str,
        pending: dict[str, Any] | None,
        ctx: RunContext,
        config: RunnableConfig,
    ) -> WorkflowAnswer:
        """The reply to the user, what the thread keeps pending, the turn's model usage.

        ``pending`` is what an earlier turn asked for: this message answers it.
        """
        spec = self.engine.workflows.get(name).spec
        if pending is not None and CANCEL.match(text):
            return WorkflowAnswer(self.prompts.reply("workflow_cancelled", name=name), None, {})
        inputs = dict((pending or {}).get("inputs") or {})
        asked = list((pending or {}).get("missing") or [])
        found, usage = await self._extract(spec, text, asked, ctx, config)
        inputs.update(found)
        # A value that cannot be its input's type ("sure" for a yes/no) is asked for again,
        # saying why; the inputs given so far are kept.
        refused = convert_all(spec, inputs)[1]
        for refused_name in refused:
            inputs.pop(refused_name)
        missing = [
            n
            for n, declared in spec.inputs.items()
            if declared.required and declared.default is None and inputs.get(n) is None
        ]
        missing += [n for n in refused if n not in missing]  # one with a default too
        if missing:
            described = [
                {"name": n, "description": spec.inputs[n].description, "refused": refused.get(n)}
                for n in missing
            ]
            reply = self.prompts.reply("workflow_needs_inputs", name=name, missing=described)
            return WorkflowAnswer(
                reply, {"workflow": name, "inputs": inputs, "missing": missing}, usage
            )
        try:
            check_inputs(spec, inputs)
        except SkilldeskError as exc:
            reply = self.prompts.reply("workflow_failed", name=name, error=exc.message)
            return WorkflowAnswer(reply, None, usage)
        record: dict[str, Any] = {}
        # The run is its thread's owner's, recorded so: it stays theirs once the thread is gone.
        owner = await self._owner(ctx.thread_id)
        # Keyed by the turn: a turn answered again (its thread resumed after a crash, the
        # message resent) finds the run it started, which goes on by its own resumption,
        # instead of starting a second run making the workflow's side effects again.
        key = _turn_key(ctx, name)
        run_id = keyed_run_id(name, key, owner) if key is not None else ""
        # Answered again, this turn follows the run begun (decided since, say): its end is
        # this turn's answer, not told to the thread beside it.
        with self.engine.answering(run_id) if key is not None else contextlib.nullcontext():
            try:
                async for event in self.engine.stream(
                    name,
                    inputs,
                    thread_id=ctx.thread_id or None,
                    profile=ctx.profile,
                    user=owner,
                    idempotency_key=key,
                    via="chat",  # this turn answers with the run's end, a cancel's too
                ):
                    if event.get("type") in LAST_EVENTS:
                        record = event["record"]
                    else:
                        emit(str(event.pop("type")), **event)
            except KeyReused:  # asked again, the model read other inputs: the run begun stands
                record = await self.engine.get_run(run_id)
            except Exception:
                # This turn fails, the run it began maybe left RUNNING (its last save failed):
                # whoever ends it tells the thread. (A turn cut off is answered again.)
                if key is not None:
                    await self.engine.turn_failed(run_id)
                raise
            if record.get("status") == "RUNNING":  # the run begun, cut off: resumed, then told
                record = await self._ended(record["id"])
        return WorkflowAnswer(self.reply(record), None, add_usage(usage, record.get("usage")))

    async def _ended(self, run_id: str) -> dict[str, Any]:
        """The record of run ``run_id`` once it is no longer running: resumed here if no
        process runs it (one process claims it), else waited for where it runs."""
        await self.engine.resume_orphans([run_id])
        # Polled: the run may go on in another process, and its record is all there is of it.
        while (record := await self.engine.get_run(run_id))["status"] == "RUNNING":  # noqa: ASYNC110
            await asyncio.sleep(_SETTLE_S)
        return record

    async def decide(
        self,
        approval_id: str,
        *,
        approved: bool,
        by: str,
        comment: str,
        post: Post,
        on_start: Callable[[str], None] | None = None,
    ) -> dict[str, Any]:
        """Decide an approval; the run goes on, and when it ends (or waits again) the thread
        it was started from is told, through ``post(thread_id, message, events, started,
        usage)``: the events of the nodes that ran after the decision are that message's
        trace, their model calls its usage (paid by whoever started the run, not the
        approver). ``on_start``: as ``WorkflowEngine.decide``'s.

        Raises:
            ApprovalNotFound, AlreadyDecided: as ``WorkflowEngine.decide``.
        """
        before = (await self.engine.asked_by(approval_id)).get("usage") or {}
        record: dict[str, Any] = {}
        events: list[Event] = []
        started = time.time()
        async for event in self.engine.decide(
            approval_id, approved=approved, by=by, comment=comment, on_start=on_start
        ):
            if event.get("type") in LAST_EVENTS:
                record = event["record"]
            elif (typed := from_custom(event)) is not None:
                events.append(typed)
        await self._tell(record, before, events, started, post)
        return record

    async def cancel(self, run_id: str, *, by: str, post: Post) -> dict[str, Any]:
        """Cancel a run that has not ended (``WorkflowEngine.stop``), wherever it runs: one
        waiting for an approval (its approval leaves the inbox, it never goes on), one under
        way (it stops at its next node at the latest; a tool call under way runs to its end,
        once); and tell the thread it came from. Returns its record: CANCELLED, or still
        RUNNING with ``cancel_requested`` when its node under way in another process outlasts
        the wait (its thread is told once it stops).

        Raises:
            RunStatusConflict: it had ended (``run_ended``, naming its status), before the
                cancel or while it went on to its end; it is a sub-workflow's run, a step of
                a run that has not ended (``run_is_step``, naming the run to cancel).
        """
        record = await self.engine.get_run(run_id)
        if record["status"] not in FINAL:
            reason = f"cancelled by {by}"
            record = await self.engine.stop(run_id, reason)
            ours = record["status"] == "CANCELLED" and record.get("error") == reason
            if ours and record.get("cancelled_while") is None:
                # It waited: nothing runs it to tell its thread (nothing used since).
                await self._tell(record, record.get("usage") or {}, [], time.time(), post)
            if ours or record["status"] == "RUNNING":
                return record
        raise RunStatusConflict(
            f"workflow run {run_id} is {record['status']}: it has ended, so there is nothing "
            "to cancel; only a run under way or waiting for an approval can be cancelled",
            code="run_ended",
        )

    async def resumed(
        self,
        before: dict[str, Any],
        record: dict[str, Any],
        events: list[dict[str, Any]],
        started: float,
        *,
        post: Post,
    ) -> None:
        """A run that went on from a decision, resumed by this process (the one that decided
        stopped or died mid-way: ``WorkflowEngine.after_decision``), ended or waits again: its
        thread is told and its starter pays, as ``decide`` does."""
        typed = [t for e in events if (t := from_custom(e)) is not None]
        await self._tell(record, before.get("usage") or {}, typed, started, post)

    async def _tell(
        self,
        record: dict[str, Any],
        before: dict[str, int],
        events: Sequence[Event],
        started: float,
        post: Post,
    ) -> None:
        usage = usage_since(record.get("usage") or {}, before)
        if usage.get("cost_micro_usd"):
            await self._charge_starter(record, usage["cost_micro_usd"])
        if record.get("thread_id") and not record.get("parent"):
            told = AIMessage(content=self.reply(record))
            await post(record["thread_id"], told, events, started, usage)

    async def _charge_starter(self, record: dict[str, Any], cost: int) -> None:
        owner = record.get("user")
        if owner is None:  # a run recorded before its starter was
            owner = await self._owner(record.get("thread_id"))
        if owner and self.spend is not None:
            await self.spend.add(owner, cost)

    async def _owner(self, thread_id: str | None) -> str | None:
        """Who thread ``thread_id`` belongs to (None: no thread, or no owner known)."""
        if not thread_id or self.records is None:
            return None
        return ((await self.records.get(thread_id)) or {}).get("owner")

    def reply(self, record: dict[str, Any]) -> str:
        """What the user is told of a run as it stands."""
        name = record.get("workflow", "")
        if record.get("status") == "WAITING":
            waiting = record.get("waiting") or {}
            return self.prompts.reply(
                "workflow_waiting",
                name=name,
                summary=waiting.get("summary", ""),
                approval=waiting.get("approval_id", ""),
            )
        if record.get("status") == "CANCELLED" and record.get("cancelled_while"):
            # Cancelled while it ran, not while it waited for approval.
            reason = record.get("error") or "cancelled"
            return self.prompts.reply("workflow_stopped", name=name, reason=reason)
        if record.get("status") == "CANCELLED":
            return self.prompts.reply(
                "workflow_withdrawn", name=name, reason=record.get("error") or "cancelled"
            )
        if record.get("status") == "SUCCEEDED":
            message = (record.get("outputs") or {}).get("message")
            return self.prompts.reply("workflow_done", name=name, message=message or "")
        return self.prompts.reply("workflow_failed", name=name, error=record.get("error", ""))

    async def _extract(
        self,
        spec: WorkflowSpec,
        text: str,
        asked: list[str],
        ctx: RunContext,
        config: RunnableConfig,
    ) -> tuple[dict[str, Any], dict[str, int]]:
        """The inputs ``text`` gives: by pattern, by the model, or (one input asked for,
        without a pattern) the whole message; and the model's usage."""
        found: dict[str, Any] = {}
        by_model: dict[str, Any] = {}
        for name, declared in spec.inputs.items():
            how = declared.how
            if declared.pattern and how == "pattern":
                match = re.search(declared.pattern, text)
                if match:
                    found[name] = match.group(1) if match.groups() else match.group(0)
            elif how == "model":
                schema: dict[str, Any] = {"type": declared.type}
                if declared.description:
                    schema["description"] = declared.description
                if declared.enum is not None:
                    schema["enum"] = list(declared.enum)
                by_model[name] = schema
        if len(asked) == 1 and asked[0] not in found and not spec.inputs[asked[0]].pattern:
            found[asked[0]] = text.strip()
        wanted = {n: s for n, s in by_model.items() if n not in found}
        if not wanted or not self.gateway.configured:
            return found, {}
        taken, usage = await self._by_model(wanted, text, ctx, config)
        return {**found, **taken}, usage

    async def _by_model(
        self, wanted: dict[str, Any], text: str, ctx: RunContext, config: RunnableConfig
    ) -> tuple[dict[str, Any], dict[str, int]]:
        spec = self.prompts.tool("workflow_inputs", properties=wanted)
        tool = function_tool(spec["name"], spec["description"], spec["parameters"])
        system = self.prompts.render("workflow_inputs")
        try:
            ctx.budget.spend_model_call()
            args, usage = await forced_call(self.gateway, ctx.profile, tool, system, text, config)
        except (ModelError, SkilldeskError) as exc:
            emit("error", code="workflow_inputs_failed", message=str(exc))
            return {}, {}
        return {k: v for k, v in args.items() if k in wanted and v not in (None, "")}, usage


def _turn_key(ctx: RunContext, name: str) -> str | None:
    """The idempotency key of the run of ``name`` a chat turn starts (the n-th of that
    workflow in the turn), or None for a run outside a thread's turn."""
    if not (ctx.thread_id and ctx.turn_id):
        return None
    nth = ctx.occurrence(f"workflow:{name}", {})
    return f"turn:{ctx.thread_id}:{ctx.turn_id}:{nth}"
