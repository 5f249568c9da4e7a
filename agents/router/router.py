"""The router: explicit target → workflow intent → skills retrieved → general assistant.

Keywords and embeddings decide when they are confident. When they are not, the close
candidates go to one expert holding them all, and the answering model picks in the call it
makes anyway; a separate small model call (``choose_route``, forced) breaks the tie only when
the candidates do not fit the budget or one of them has side-effecting tools (a wrong tool
must not be offered).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

import structlog
from langchain_core.runnables import RunnableConfig

from agents.errors import BudgetExceeded, ModelError
from agents.models import ModelGateway
from agents.models.structured import forced_call, function_tool
from agents.prompts import Prompts
from agents.router.intents import small_talk, split_intents
from agents.run import RunContext
from agents.skills.definitions import side_effects, within
from agents.skills.index import SearchHit
from agents.skills.loader import Skill
from agents.skills.service import SkillService
from agents.workflows.matcher import NoWorkflows, WorkflowMatcher

log = structlog.get_logger(__name__)
CHOOSE = "choose_route"

# What answers: a workflow, one skill's expert, one expert holding close candidates (the
# model picks), several requests (planned), the assistant.
RouteKind = Literal["workflow", "skill", "candidates", "multi", "general"]
# How it was decided: named in the request, a workflow's intent, retrieval alone, the
# model's tie-break, the previous turn's skill (a follow-up), a fallback after a failure, or
# a workflow that asked for an input (the message answers it).
DecidedBy = Literal["explicit", "workflow", "retrieval", "model", "context", "fallback", "pending"]
Candidates = tuple[dict[str, Any], ...]


@dataclass(frozen=True)
class RouterOptions:
    """Thresholds on fused retrieval scores (0–1), calibrated on bench/data."""

    confident: float = 0.45
    margin: float = 0.08  # over the next skill, to answer with no model call
    clause_margin: float = 0.02  # the same for each request of a message with several
    ambiguous_floor: float = 0.25
    multi_clause: float = 0.35
    workflow: float = 0.6
    follow_up_words: int = 8  # a message this short that retrieval cannot place is a follow-up
    # Close candidates (at most ``offer_most``) whose definitions fit ``offer_tokens`` go to
    # one expert together; the general assistant gets its best hits' definitions the same
    # way. 0 tokens: the tie-break call decides among candidates, and nothing is pre-loaded.
    offer_tokens: int = 2000
    # Four, not three: a skill retrieved fourth was the commonest load_skill round trip
    # (bench/routing_policy.py: ToolAlpaca 1.12 -> 1.09 calls per task, the labelled set
    # 1.07 -> 1.05, and fewer tokens there, a second call re-reading the whole prompt).
    offer_most: int = 4
    offer_window: float = 0.1  # a candidate scores at most this far below the best
    preload_floor: float = 0.1  # the general assistant's hits below this are only listed
    # A message this close (cosine) to an example learned from use routes to its skill with
    # no model call, when no other skill has a learned example nearly as close (``margin``).
    learned: float = 0.8


@dataclass(frozen=True, kw_only=True)
class Route:
    """One routing decision, as recorded in state and emitted as an event."""

    kind: RouteKind
    by: DecidedBy
    target: str | None = None
    skills: tuple[str, ...] = ()
    candidates: Candidates = ()
    reason: str = ""
    usage: dict[str, int] = field(default_factory=dict)
    clauses: tuple[dict[str, str], ...] = ()  # for "multi": each request and its skill
    # Skills whose definitions (instructions and tools) the answering prompt holds from the
    # start: the candidates an expert chooses among, the general assistant's best hits.
    offered: tuple[str, ...] = ()

    @classmethod
    def to_skill(cls, name: str, by: DecidedBy, reason: str, **more: Any) -> Route:
        """A route to one skill's expert."""
        return cls(kind="skill", by=by, target=name, skills=(name,), reason=reason, **more)

    def as_state(self) -> dict[str, Any]:
        """The ``route`` field of thread state."""
        return {
            "kind": self.kind,
            "by": self.by,
            "target": self.target,
            "skills": list(self.skills),
            "candidates": list(self.candidates),
            "reason": self.reason,
            "clauses": list(self.clauses),
            "offered": list(self.offered),
        }


class Router:
    """Decides the route of one user message."""

    def __init__(
        self,
        skills: SkillService | None,
        gateway: ModelGateway,
        prompts: Prompts,
        workflows: WorkflowMatcher | None = None,
        options: RouterOptions | None = None,
    ) -> None:
        self.skills = skills
        self.gateway = gateway
        self.prompts = prompts
        self.workflows = workflows or NoWorkflows()
        self.options = options or RouterOptions()

    async def decide(
        self,
        text: str,
        ctx: RunContext,
        config: RunnableConfig,
        previous: dict[str, Any] | None = None,
    ) -> Route:
        """Route ``text``; never raises for a model failure (falls back to general).

        The steps in order, each deciding or passing: a target named in the request, a
        workflow's intent, retrieval (several requests, then one confident skill), the
        previous turn's skill for a follow-up, close candidates offered to one expert (or,
        when they cannot be, the model's tie-break), the general assistant with its best
        hits' definitions.
        ``previous`` is the thread's last route.
        """
        decided = self._explicit(ctx)
        if decided is not None:
            return decided
        if self.skills is None:
            decided = self._workflow(text)
            return decided or Route(kind="general", by="retrieval", reason="no skills installed")
        # A workflow's intent and retrieval run the embedding model: one job off the event
        # loop (on the encoder's thread), so other requests proceed meanwhile.
        decided, hits, multi = await self.skills.off_loop(self._locate, text)
        if decided is not None:
            return decided
        if not len(self.skills.registry):
            return Route(kind="general", by="retrieval", reason="no skills installed")
        candidates = tuple(
            {"name": h.name, "score": h.score, "dense": h.dense, "keyword": h.keyword} for h in hits
        )
        decided = self._several(multi, candidates)
        if decided is not None:
            return decided
        if not hits:
            return Route(kind="general", by="retrieval", reason="no skill matches")
        decided = self._confident(hits, candidates) or self._follow_up(
            text, hits, candidates, previous
        )
        if decided is not None:
            return decided
        close = self._close(hits)
        if not close:
            return self._general(text, hits, candidates)
        return self._offer(close, candidates) or await self._tie_break(
            text, [h.name for h in close], candidates, ctx, config
        )

    def _close(self, hits: list[SearchHit]) -> list[SearchHit]:
        """The best hit when it reaches the ambiguous floor, with the next ones (up to
        ``offer_most`` in all) whose score is within ``offer_window`` of it: a hit far below
        the best rarely fits and costs its definition, one just below the floor beside a best
        hit just above it is as likely as that one."""
        top = hits[0].score
        if top < self.options.ambiguous_floor:
            return []
        window = top - self.options.offer_window
        return [h for h in hits[: self.options.offer_most] if h.score >= window]

    def _explicit(self, ctx: RunContext) -> Route | None:
        """A skill or workflow the request names."""
        if ctx.target_skill:
            return Route.to_skill(ctx.target_skill, "explicit", "named in the request")
        if ctx.target_workflow:
            return Route(
                kind="workflow",
                by="explicit",
                target=ctx.target_workflow,
                reason="named in the request",
            )
        return None

    def _workflow(self, text: str) -> Route | None:
        """A workflow whose intent matches the message well enough."""
        match = self.workflows.match(text)
        if match is None or match.score < self.options.workflow:
            return None
        return Route(
            kind="workflow",
            by="workflow",
            target=match.name,
            candidates=({"name": match.name, "score": match.score},),
            reason=match.reason or "workflow intent matched",
        )

    def _several(self, multi: list[dict[str, str]], candidates: Candidates) -> Route | None:
        """Several requests, each mapped to a different skill."""
        if len(multi) < 2:
            return None
        return Route(
            kind="multi",
            by="retrieval",
            skills=tuple(dict.fromkeys(c["skill"] for c in multi)),
            candidates=candidates,
            reason=f"{len(multi)} requests for different skills",
            clauses=tuple(multi),
        )

    def _confident(self, hits: list[SearchHit], candidates: Candidates) -> Route | None:
        """The best skill when its score and its lead over the next one are high enough, or
        the skill of an example learned from use that the message is close to."""
        top = hits[0]
        margin = top.score - (hits[1].score if len(hits) > 1 else 0.0)
        if top.score >= self.options.confident and margin >= self.options.margin:
            reason = f"score {top.score:.2f}, margin {margin:.2f}"
            if top.learned and top.learned >= top.dense:  # its best vector was a learned one
                reason += f", like an example learned from use (cosine {top.learned:.2f})"
            return Route.to_skill(top.name, "retrieval", reason, candidates=candidates)
        return self._learned(hits, candidates)

    def _learned(self, hits: list[SearchHit], candidates: Candidates) -> Route | None:
        """The skill whose learned example is closest to the message, when it is close enough
        and no other skill's learned example comes near it."""
        ranked = sorted(hits, key=lambda h: -h.learned)
        best = ranked[0]
        rival = ranked[1].learned if len(ranked) > 1 else 0.0
        if best.learned < self.options.learned or best.learned - rival < self.options.margin:
            return None
        reason = f"like an example learned from use (cosine {best.learned:.2f})"
        return Route.to_skill(best.name, "retrieval", reason, candidates=candidates)

    def _follow_up(
        self,
        text: str,
        hits: list[SearchHit],
        candidates: Candidates,
        previous: dict[str, Any] | None,
    ) -> Route | None:
        """The previous turn's skill, for a follow-up retrieval cannot place on its own
        ("and the one after that?")."""
        previous = previous or {}
        # A candidates turn records the skill the model used as its target, when it used one.
        kind = previous.get("kind")
        follow = previous.get("target") if kind in ("skill", "candidates") else None
        if not follow or self.skills is None or follow not in self.skills.registry:
            return None
        if small_talk(text):
            return None
        top = hits[0]
        short = _words(text) <= self.options.follow_up_words
        if not (top.name == follow or top.score < self.options.ambiguous_floor or short):
            return None
        reason = "a follow-up of the previous turn's skill"
        return Route.to_skill(str(follow), "context", reason, candidates=candidates)

    def _general(self, text: str, hits: list[SearchHit], candidates: Candidates) -> Route:
        """The general assistant, with the definitions of its best hits that fit the budget
        (not for small talk, nor hits below ``preload_floor``: those are only listed)."""
        floor = self.options.ambiguous_floor
        reason = f"best score {hits[0].score:.2f} is below {floor:.2f}"
        useful = [h for h in hits if h.score >= self.options.preload_floor]
        offered = [] if small_talk(text) else self._fitting(useful)
        return Route(
            kind="general",
            by="retrieval",
            candidates=candidates,
            reason=reason,
            offered=tuple(s.name for s in offered),
        )

    def _offer(self, close: list[SearchHit], candidates: Candidates) -> Route | None:
        """One expert holding the close candidates, the model picking in its answer, when
        their definitions fit the budget (at least two, or the only one) and none of them
        has side-effecting tools; otherwise ``None``: the tie-break call decides."""
        skills = self._skills(close)
        if not skills or any(side_effects(s) for s in skills):
            return None
        offered = self._fitting(close)
        if len(offered) < min(2, len(skills)):
            return None
        names = tuple(s.name for s in offered)
        reason = f"{len(names)} close candidate{'s' if len(names) > 1 else ''}; the model picks"
        return Route(
            kind="candidates",
            by="retrieval",
            skills=names,
            offered=names,
            candidates=candidates,
            reason=reason,
        )

    def _fitting(self, hits: list[SearchHit]) -> list[Skill]:
        """The best hits' skills whose definitions fit the offer budget together."""
        return within(self._skills(hits), self.options.offer_tokens, self.options.offer_most)

    def _skills(self, hits: list[SearchHit]) -> list[Skill]:
        assert self.skills is not None
        registry = self.skills.registry
        # A reload may be under way: a hit may name a skill that just left.
        return [registry.get(h.name) for h in hits if h.name in registry]

    def anticipate(self, text: str, ctx: RunContext) -> None:
        """Start embedding what routing ``text`` will search, and return at once: the query
        encoder works while the run reads the thread and writes its first checkpoint."""
        if ctx.target_skill or ctx.target_workflow or self.skills is None or not text.strip():
            return
        by_words = self.workflows.match(text, words_only=True)
        if by_words is not None and by_words.score >= self.options.workflow:
            return  # a workflow's keyword or example decides: no skill search will follow
        clauses = split_intents(text)
        self.skills.anticipate(clauses if len(clauses) >= 2 else [text])

    def _locate(self, text: str) -> tuple[Route | None, list[SearchHit], list[dict[str, str]]]:
        """The workflow the message asks for; else, when skills are installed, its best
        skills and requests (``_retrieve``)."""
        decided = self._workflow(text)
        if decided is not None or self.skills is None or not len(self.skills.registry):
            return decided, [], []
        return None, *self._retrieve(text)

    def _retrieve(self, text: str) -> tuple[list[SearchHit], list[dict[str, str]]]:
        """The message's best skills, and its requests when they name different skills.

        When the clauses route on their own, their hits are the candidates and the whole
        message is not embedded: one model pass fewer for every multi-intent message.
        """
        assert self.skills is not None
        clauses = split_intents(text)
        if len(clauses) >= 2:
            self.skills.prefetch(clauses)  # one embedding job for all of them
            multi, hits = self._multi(clauses)
            if multi:
                best: dict[str, SearchHit] = {}
                for hit in hits:
                    if hit.name not in best or hit.score > best[hit.name].score:
                        best[hit.name] = hit
                return sorted(best.values(), key=lambda h: -h.score), multi
        return self.skills.search(text, k=5), []

    def _multi(self, clauses: list[str]) -> tuple[list[dict[str, str]], list[SearchHit]]:
        """Clauses that each map confidently to a different skill (empty unless two or more),
        and every clause's hits."""
        assert self.skills is not None
        chosen: list[dict[str, str]] = []
        seen: list[SearchHit] = []
        for clause in clauses:
            hits = self.skills.search(clause, k=2)
            seen += hits
            if not hits or hits[0].score < self.options.multi_clause:
                continue
            margin = hits[0].score - (hits[1].score if len(hits) > 1 else 0.0)
            clear = margin >= self.options.clause_margin
            if clear and all(c["skill"] != hits[0].name for c in chosen):
                chosen.append({"clause": clause, "skill": hits[0].name})
        return (chosen if len(chosen) >= 2 else []), seen

    async def _tie_break(
        self,
        text: str,
        names: list[str],
        candidates: Candidates,
        ctx: RunContext,
        config: RunnableConfig,
    ) -> Route:
        """The model picks among close candidates (or none) with one small forced call."""
        if not self.gateway.configured:
            return Route(kind="general", by="fallback", candidates=candidates, reason="no model")
        assert self.skills is not None
        names = [n for n in names if n in self.skills.registry]  # a reload may be under way
        spec = self.prompts.tool(CHOOSE, skills=names)
        tool = function_tool(spec["name"], spec["description"], spec["parameters"])
        try:
            ctx.budget.spend_model_call()
            skills = [self.skills.registry.get(n) for n in names]
            system = self.prompts.render("router", candidates=skills)
            args, usage = await forced_call(
                self.gateway,
                self.gateway.node_profile("router", ctx.profile),
                tool,
                system,
                text,
                config,
            )
        except (ModelError, BudgetExceeded) as exc:
            log.warning("router.tie_break_failed", error=str(exc))
            reason = f"tie-break failed: {exc}"
            return Route(kind="general", by="fallback", candidates=candidates, reason=reason)
        choice = args.get("skill")
        if choice in names:
            reason = "the model chose among close candidates"
            return Route.to_skill(str(choice), "model", reason, candidates=candidates, usage=usage)
        return Route(
            kind="general",
            by="model",
            candidates=candidates,
            reason="the model chose none of the candidates",
            usage=usage,
        )


_WORDS = re.compile(r"[A-Za-z0-9]+")
_CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")


def _words(text: str) -> float:
    """Length in words; two CJK characters count as one word."""
    return len(_WORDS.findall(text)) + len(_CJK.findall(text)) / 2
