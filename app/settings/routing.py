"""How a message is routed and answered: the skill index's share of the prompt, the
confidence thresholds, what is learned from use, and the limits of a run."""

from __future__ import annotations

from pydantic import BaseModel, Field

from agents.router.learned import LearnOptions


class RoutingSettings(BaseModel):
    """Routing, learning from use and a run's limits (a part of ``Settings``)."""

    skills_prompt_budget: int = Field(
        300, ge=50, le=4000, description="Tokens of skill index in each prompt."
    )
    route_confident: float = Field(
        0.45,
        ge=0,
        le=1,
        description="Retrieval score (with a margin) at which a skill answers without a model "
        "call to route (calibrated in bench/retrieval_quality.py: precision 0.99).",
    )
    route_ambiguous_floor: float = Field(
        0.25, ge=0, le=1, description="Below this score no skill is a candidate: general chat."
    )
    route_offer_tokens: int = Field(
        2000,
        ge=0,
        le=100_000,
        description=(
            "When retrieval is not confident, up to three close candidates whose definitions "
            "fit in this many tokens go to one expert, which uses the one that fits (no "
            "separate routing call); the general assistant gets its best hits' definitions "
            "within the same budget. 0: a routing call picks among candidates, nothing is "
            "pre-loaded."
        ),
    )
    learn_examples: bool = Field(
        True,
        description=(
            "Routing learns from use: a user's message whose skill the model chose (among "
            "candidates, in a tie-break, or with load_skill) in a turn that succeeded is stored "
            "as an example of that skill (users' words, kept in the checkpoint database) and "
            "routes the next such message with no model choosing. false: nothing is stored."
        ),
    )
    learn_examples_per_skill: int = Field(
        50, ge=1, le=10_000, description="Learned examples kept per skill (oldest unconfirmed go)."
    )
    route_learned: float = Field(
        0.8,
        ge=0,
        le=1,
        description="Cosine to an example learned from use at which a message routes to its "
        "skill with no model call.",
    )
    max_tool_rounds: int = Field(5, ge=1, le=50, description="Tool-calling rounds per expert.")
    joint_expert_tokens: int = Field(
        4000,
        ge=0,
        le=100_000,
        description=(
            "Several independent requests whose skills' definitions (instructions and tool "
            "schemas) fit in this many tokens are answered by one expert holding them all; "
            "0 runs an expert per request and an aggregator."
        ),
    )
    max_model_calls: int = Field(12, ge=1, le=200, description="Model calls per run, in all.")
    max_tool_calls: int = Field(24, ge=1, le=500, description="Tool calls per run, in all.")

    def learn_options(self) -> LearnOptions:
        """Whether and how much routing learns from use."""
        return LearnOptions(enabled=self.learn_examples, per_skill=self.learn_examples_per_skill)
