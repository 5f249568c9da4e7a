"""The router: explicit target → workflow intent → skills retrieved → general assistant.

Keywords and embeddings decide when they are confident; one small model call (function
calling, forced) breaks a tie only when they are not.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import structlog
from langchain_core.runnables import RunnableConfig

from agents.errors import ModelError
from agents.graph.context import BudgetExceeded, RunContext
from agents.models import ModelGateway
from agents.models.structured import forced_call, function_tool
from agents.prompts import Prompts
from agents.router.intents import small_talk, split_intents
from agents.router.workflows import NoWorkflows, WorkflowMatcher
from agents.skills.index import SearchHit
from agents.skills.service import SkillService

log = structlog.get_logger(__name__)
CHOOSE = "choose_route"


@dataclass(frozen=True)
class RouterOptions:
    """Thresholds on fused retrieval scores (0–1), calibrated on bench/data."""

    confident: float = 0.45
    margin: float = 0.04
    ambiguous_floor: float = 0.25
    multi_clause: float = 0.35
    workflow: float = 0.6
    follow_up_words: int = 8  # a message this short that retrieval cannot place is a follow-up


@dataclass(frozen=True)
class Route:
    """One routing decision, as recorded in state and emitted as an event."""

    kind: str  # "workflow" | "skill" | "multi" | "general"
    by: str  # "explicit" | "workflow" | "retrieval" | "model" | "fallback"
    target: str | None = None
    skills: tuple[str, ...] = ()
    candidates: tuple[dict[str, Any], ...] = field(default_factory=tuple)
    reason: str = ""
    usage: dict[str, int] = field(default_factory=dict)
    clauses: tuple[dict[str, str], ...] = ()  # for "multi": each request and its skill

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

        ``previous`` is the thread's last route: a follow-up that retrieval cannot place on
        its own ("and the one after that?") stays with the previous turn's skill.
        """
        if ctx.target_skill:
            return Route(
                "skill",
                "explicit",
                ctx.target_skill,
                (ctx.target_skill,),
                reason="named in the request",
            )
        if ctx.target_workflow:
            return Route("workflow", "explicit", ctx.target_workflow, reason="named in the request")
        match = self.workflows.match(text)
        if match is not None and match.score >= self.options.workflow:
            return Route(
                "workflow",
                "workflow",
                match.name,
                candidates=({"name": match.name, "score": match.score},),
                reason=match.reason or "workflow intent matched",
            )
        if self.skills is None or not len(self.skills.registry):
            return Route("general", "retrieval", reason="no skills installed")
        # Retrieval runs the embedding model: off the event loop, so other requests proceed.
        hits, multi = await self.skills.off_loop(self._retrieve, text)
        candidates = tuple(
            {"name": h.name, "score": h.score, "dense": h.dense, "keyword": h.keyword} for h in hits
        )
        if len(multi) >= 2:
            return Route(
                "multi",
                "retrieval",
                None,
                tuple(dict.fromkeys(c["skill"] for c in multi)),
                candidates,
                reason=f"{len(multi)} requests for different skills",
                clauses=tuple(multi),
            )
        if not hits:
            return Route("general", "retrieval", reason="no skill matches")
        top = hits[0]
        margin = top.score - (hits[1].score if len(hits) > 1 else 0.0)
        if top.score >= self.options.confident and margin >= self.options.margin:
            return Route(
                "skill",
                "retrieval",
                top.name,
                (top.name,),
                candidates,
                reason=f"score {top.score:.2f}, margin {margin:.2f}",
            )
        follow = (previous or {}).get("target") if (previous or {}).get("kind") == "skill" else None
        short = _words(text) <= self.options.follow_up_words
        if (
            follow in self.skills.registry
            and not small_talk(text)
            and (top.name == follow or top.score < self.options.ambiguous_floor or short)
        ):
            return Route(
                "skill",
                "context",
                str(follow),
                (str(follow),),
                candidates,
                reason="a follow-up of the previous turn's skill",
            )
        close = [h for h in hits[:3] if h.score >= self.options.ambiguous_floor]
        if not close:
            return Route(
                "general",
                "retrieval",
                candidates=candidates,
                reason=f"best score {top.score:.2f} is below {self.options.ambiguous_floor:.2f}",
            )
        return await self._tie_break(text, [h.name for h in close], candidates, ctx, config)

    def anticipate(self, text: str, ctx: RunContext) -> None:
        """Start embedding what routing ``text`` will search, and return at once: the query
        encoder works while the run reads the thread and writes its first checkpoint."""
        if ctx.target_skill or ctx.target_workflow or self.skills is None or not text.strip():
            return
        clauses = split_intents(text)
        self.skills.anticipate(clauses if len(clauses) >= 2 else [text])

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
            if margin >= self.options.margin and all(c["skill"] != hits[0].name for c in chosen):
                chosen.append({"clause": clause, "skill": hits[0].name})
        return (chosen if len(chosen) >= 2 else []), seen

    async def _tie_break(
        self,
        text: str,
        names: list[str],
        candidates: tuple[dict[str, Any], ...],
        ctx: RunContext,
        config: RunnableConfig,
    ) -> Route:
        if not self.gateway.configured:
            return Route("general", "fallback", candidates=candidates, reason="no model")
        assert self.skills is not None
        names = [n for n in names if n in self.skills.registry]  # a reload may be under way
        described = "\n".join(f"- {n}: {self.skills.registry.get(n).description}" for n in names)
        tool = function_tool(
            CHOOSE,
            "Pick what should answer the user's message.",
            {
                "type": "object",
                "additionalProperties": False,
                "required": ["skill"],
                "properties": {"skill": {"type": "string", "enum": [*names, "none"]}},
            },
        )
        try:
            ctx.budget.spend_model_call()
            system = self.prompts.render("router", candidates=described)
            args, usage = await forced_call(self.gateway, ctx.profile, tool, system, text, config)
        except (ModelError, BudgetExceeded) as exc:
            log.warning("router.tie_break_failed", error=str(exc))
            return Route(
                "general", "fallback", candidates=candidates, reason=f"tie-break failed: {exc}"
            )
        choice = args.get("skill")
        if choice in names:
            return Route(
                "skill",
                "model",
                str(choice),
                (str(choice),),
                candidates,
                reason="the model chose among close candidates",
                usage=usage,
            )
        return Route(
            "general",
            "model",
            candidates=candidates,
            reason="the model chose none of the candidates",
            usage=usage,
        )


_WORDS = re.compile(r"[A-Za-z0-9]+")
_CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")


def _words(text: str) -> float:
    """Length in words; two CJK characters count as one word."""
    return len(_WORDS.findall(text)) + len(_CJK.findall(text)) / 2
