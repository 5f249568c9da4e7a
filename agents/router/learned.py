"""Routing that learns from use.

When the model chose a turn's skill (among close candidates, in a tie-break, or through
``load_skill``) and the turn succeeded, the user's message becomes an example of that skill:
stored beside the checkpoints with where it came from, capped per skill, and searched with
the skill's own vectors at once, so the next such message routes with no model choosing.
Feedback on the run confirms its examples (up) or removes them (down); operators list and
delete them. The examples are users' words: ``LearnOptions.enabled`` switches it off.
"""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

import structlog
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from agents.errors import SkillNotFound
from agents.router.intents import small_talk
from agents.skills.meta import LOAD_SKILL, META_TOOLS, NOTE_SKILL
from agents.skills.service import SkillService
from agents.state.documents import Documents

log = structlog.get_logger(__name__)

EXAMPLE = "learned_example"  # one example: owner = its skill, status = learned | confirmed
RUN = "learned_run"  # a run's examples, for feedback on the run
THREAD = "learned_thread"  # a thread's examples, deleted with it
FEEDBACK = "run_feedback"  # what a user said of a run
STATE = "learned_state"  # a stamp that moves with every change, for other processes
_STAMP = "stamp"
How = Literal["candidates", "tie-break", "load_skill", "tool", "noted"]
Rating = Literal["up", "down"]
_MOST = 100_000  # a listing of every learned example (the cap keeps it far below)


@dataclass(frozen=True)
class LearnOptions:
    """Whether and how much the router learns from use."""

    enabled: bool = True
    per_skill: int = 50  # examples kept per skill: the oldest unconfirmed go first
    min_words: int = 3  # shorter messages ("yes", "and the next?") say little of a skill
    max_chars: int = 500


@dataclass(frozen=True)
class Example:
    """One learned example and its provenance."""

    id: str
    skill: str
    text: str
    thread_id: str
    run_id: str
    how: How  # how the model chose the skill
    created: float
    # Stored: learned or confirmed; "removed" only in what ``feedback`` returns of a "down".
    status: Literal["learned", "confirmed", "removed"] = "learned"
    comment: str | None = None  # the feedback's comment, when a user confirmed it

    @classmethod
    def of(cls, body: dict[str, Any]) -> Example:
        """An example from its stored document."""
        return cls(**{k: body[k] for k in cls.__dataclass_fields__ if k in body})


class LearnedExamples:
    """Learned examples: kept in the documents store, searched through the skills' index."""

    def __init__(
        self, documents: Documents, skills: SkillService, options: LearnOptions | None = None
    ) -> None:
        self.documents = documents
        self.skills = skills
        self.options = options or LearnOptions()
        self._lock = asyncio.Lock()
        self._seen: str | None = None  # the stamp of the examples the index holds

    async def load(self) -> int:
        """Bring the index in step with the stored examples: at start-up, and when another
        process (a service beside this one, the command line) changed them. Only the skills
        whose examples changed are re-indexed. Returns how many examples there are."""
        self._seen = await self._stamp()
        found = [Example.of(b) for b in await self.documents.find(EXAMPLE, limit=_MOST)]
        by_skill: dict[str, tuple[str, ...]] = {}
        for example in reversed(found):  # oldest first
            by_skill[example.skill] = (*by_skill.get(example.skill, ()), example.text)
        indexed = self.skills.index.learned_all()
        changed: dict[str, Sequence[str]] = {
            name: texts
            for name, texts in by_skill.items()
            if tuple(dict.fromkeys(texts)) != indexed.get(name)
        }
        changed.update({name: () for name in indexed if name not in by_skill})
        if changed:
            await self.skills.off_loop(self.skills.index.learn_all, changed)
            log.info("skills.learned_loaded", examples=len(found), skills_changed=len(changed))
        return len(found)

    async def keep_fresh(self, interval_s: float = 5.0) -> None:
        """Every ``interval_s``, pick up what other processes learned or deleted (one read
        of a stamp each time; the examples are read only when it moved). Runs until
        cancelled."""
        while True:
            await asyncio.sleep(interval_s)
            try:
                if await self._stamp() != self._seen:
                    async with self._lock:
                        await self.load()
            except Exception:  # the next round tries again
                log.exception("skills.learned_refresh_failed")

    async def after_turn(self, thread_id: str, run_id: str, values: dict[str, Any]) -> None:
        """Learn from a turn that succeeded, when the model chose its skill."""
        if not self.options.enabled:
            return
        chosen = chosen_skill(values, self.skills)
        text = _turn_text(values.get("messages", []))
        if chosen is None or not self._worth_learning(text):
            return
        await self.learn(chosen[0], text, thread_id=thread_id, run_id=run_id, how=chosen[1])

    async def learn(
        self, skill: str, text: str, *, thread_id: str, run_id: str, how: How
    ) -> Example | None:
        """Store ``text`` as an example of ``skill`` and index it; ``None`` when the skill
        has it already."""
        async with self._lock:
            kept = await self.examples(skill)
            if any(_same(e.text, text) for e in kept):
                return None
            example = Example(
                id=uuid.uuid4().hex[:12],
                skill=skill,
                text=text.strip(),
                thread_id=thread_id,
                run_id=run_id,
                how=how,
                created=time.time(),
            )
            await self._put(example)
            for kind, key in ((RUN, run_id), (THREAD, thread_id)):
                made = await self.documents.get(kind, key) or {"examples": []}
                await self.documents.put(kind, key, {"examples": [*made["examples"], example.id]})
            kept = [example, *kept]
            # Over the cap: the oldest unconfirmed examples go first, then the oldest.
            over = len(kept) - self.options.per_skill
            if over > 0:
                order = sorted(kept, key=lambda e: (e.status == "confirmed", e.created))
                for old in order[:over]:
                    await self.documents.delete(EXAMPLE, old.id)
                kept = [e for e in kept if e not in order[:over]]
            await self._reindex(skill, kept)
        log.info("skills.example_learned", skill=skill, how=how, example=example.id)
        return example

    async def examples(self, skill: str) -> list[Example]:
        """The examples learned for ``skill``, newest first."""
        found = await self.documents.find(EXAMPLE, owner=skill, limit=_MOST)
        return [Example.of(b) for b in found]

    async def delete(self, skill: str, example_id: str) -> bool:
        """Remove one example of ``skill``; whether there was one."""
        async with self._lock:
            body = await self.documents.get(EXAMPLE, example_id)
            if body is None or body.get("skill") != skill:
                return False
            await self.documents.delete(EXAMPLE, example_id)
            await self._reindex(skill, await self.examples(skill))
        log.info("skills.example_deleted", skill=skill, example=example_id)
        return True

    async def forget_thread(self, thread_id: str) -> int:
        """Delete every example learned from a thread (the thread is being deleted);
        returns how many there were."""
        made = await self.documents.get(THREAD, thread_id)
        if made is None:
            return 0
        skills: set[str] = set()
        async with self._lock:
            for example_id in made["examples"]:
                body = await self.documents.get(EXAMPLE, example_id)
                if body is not None:
                    skills.add(str(body["skill"]))
                    await self.documents.delete(EXAMPLE, example_id)
            await self.documents.delete(THREAD, thread_id)
            for skill in skills:
                await self._reindex(skill, await self.examples(skill))
        return len(made["examples"])

    async def feedback(
        self, thread_id: str, run_id: str, rating: Rating, comment: str | None = None
    ) -> list[Example]:
        """A user's verdict on a run: ``up`` confirms the examples it produced (the cap keeps
        them longest), ``down`` removes them. Returns the examples it touched, as they are
        now (``removed``, for a down)."""
        await self.documents.put(
            FEEDBACK,
            run_id,
            {
                "thread_id": thread_id,
                "run_id": run_id,
                "rating": rating,
                "comment": comment,
                "created": time.time(),
            },
            owner=thread_id,
            status=rating,
        )
        run = await self.documents.get(RUN, run_id) or {"examples": []}
        touched: list[Example] = []
        async with self._lock:
            for example_id in run["examples"]:
                body = await self.documents.get(EXAMPLE, example_id)
                if body is None or body.get("thread_id") != thread_id:
                    continue
                example = Example.of(body)
                if rating == "down":
                    await self.documents.delete(EXAMPLE, example.id)
                    example = Example(**{**asdict(example), "status": "removed"})
                else:
                    example = Example(
                        **{**asdict(example), "status": "confirmed", "comment": comment}
                    )
                    await self._put(example)
                touched.append(example)
            for skill in {e.skill for e in touched}:
                await self._reindex(skill, await self.examples(skill))
        log.info("run.feedback", run=run_id, rating=rating, examples=len(touched))
        return touched

    def _worth_learning(self, text: str) -> bool:
        words = len(re.findall(r"\w+", text)) + len(_CJK.findall(text)) / 2
        return (
            words >= self.options.min_words
            and len(text) <= self.options.max_chars
            and not small_talk(text)
        )

    async def _put(self, example: Example) -> None:
        await self.documents.put(
            EXAMPLE,
            example.id,
            asdict(example),
            owner=example.skill,
            status=example.status,
            updated=example.created,
        )

    async def _reindex(self, skill: str, kept: list[Example]) -> None:
        """Index ``skill``'s examples as they are now stored, and tell other processes."""
        texts = [e.text for e in sorted(kept, key=lambda e: e.created)]
        await self.skills.off_loop(self.skills.index.learn, skill, texts)
        self._seen = uuid.uuid4().hex
        await self.documents.put(STATE, _STAMP, {"stamp": self._seen})

    async def _stamp(self) -> str | None:
        body = await self.documents.get(STATE, _STAMP)
        return None if body is None else str(body["stamp"])


def chosen_skill(values: dict[str, Any], skills: SkillService) -> tuple[str, How] | None:
    """The skill the model chose for the turn that ended with ``values``, and how; ``None``
    when retrieval, the request or the thread's context chose it, or when the turn used no
    skill, or several, or a tool of the one it used failed, or it ended without an answer."""
    route = values.get("route") or {}
    turn = _this_turn(values.get("messages", []))
    answer = next((m for m in reversed(turn) if isinstance(m, AIMessage)), None)
    notes_only = all(c["name"] == NOTE_SKILL for c in answer.tool_calls) if answer else False
    if answer is None or not notes_only or not answer.text.strip():
        return None
    # A skill's tool that failed spoils the turn; a refused load_skill does not.
    failed = [m for m in turn if isinstance(m, ToolMessage) and m.status == "error"]
    if any(m.name not in META_TOOLS for m in failed):
        return None
    kind, by, target = route.get("kind"), route.get("by"), route.get("target")
    if kind == "candidates" and target:
        return str(target), "candidates"
    if kind == "skill" and by == "model" and target:
        return str(target), "tie-break"
    if kind != "general":
        return None
    used, how = _used(turn, skills)
    if len(used) != 1:
        return None
    return used[0], how


def _used(turn: list[BaseMessage], skills: SkillService) -> tuple[list[str], How]:
    """The skills the turn loaded, noted or whose tools it called, and how the first was
    found (``load_skill``, ``noted``, or ``tool``: a pre-loaded skill's tool)."""
    used: list[str] = []
    how: How | None = None
    refused = {m.tool_call_id for m in turn if isinstance(m, ToolMessage) and m.status == "error"}
    for message in turn:
        for call in message.tool_calls if isinstance(message, AIMessage) else []:
            name: str | None = None
            if call["id"] in refused:
                continue
            if call["name"] in (LOAD_SKILL, NOTE_SKILL):
                name = str(call["args"].get("name"))
                how = how or ("load_skill" if call["name"] == LOAD_SKILL else "noted")
            else:
                try:
                    name = skills.registry.tool(call["name"])[0].name
                except SkillNotFound:
                    continue
            if name in skills.registry and name not in used:
                used.append(name)
    return used, how or "tool"


def _this_turn(messages: list[BaseMessage]) -> list[BaseMessage]:
    """The messages after the newest user message."""
    for i in range(len(messages) - 1, -1, -1):
        if isinstance(messages[i], HumanMessage):
            return list(messages[i + 1 :])
    return []


def _turn_text(messages: list[BaseMessage]) -> str:
    human = next((m for m in reversed(messages) if isinstance(m, HumanMessage)), None)
    return human.text.strip() if human is not None else ""


_CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")


def _same(a: str, b: str) -> bool:
    return " ".join(a.casefold().split()) == " ".join(b.casefold().split())
