"""Examples routing learned from use, and feedback on a run."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class LearnedExamplePublic(BaseModel):
    """A user's message kept as an example of the skill the model chose for it."""

    id: str = Field(description="The example's id (to delete it).")
    skill: str = Field(description="The skill it routes to.")
    text: str = Field(description="The user's message, as written.")
    thread_id: str = Field(description="The thread it came from.")
    run_id: str = Field(description="The run it came from (`run_finished` carries it).")
    how: str = Field(
        description="How the model chose the skill: `candidates` (among close candidates), "
        "`tie-break`, `load_skill`, or `tool` (the general assistant used a pre-loaded skill)."
    )
    created: float = Field(description="When it was learned (Unix time).")
    status: Literal["learned", "confirmed", "removed"] = Field(
        description="`confirmed` once a user's feedback on its run was up; `removed` in the "
        "answer to feedback that was down (it is deleted: routing no longer uses it)."
    )
    comment: str | None = Field(None, description="The confirming feedback's comment.")


class LearnedExamplesPublic(BaseModel):
    """The examples learned for one skill, newest first."""

    skill: str = Field(description="The skill.")
    learning: bool = Field(description="Whether the service learns new examples now.")
    data: list[LearnedExamplePublic] = Field(description="Newest first.")


class FeedbackRequest(BaseModel):
    """A user's verdict on a run's answer."""

    model_config = ConfigDict(strict=True, extra="forbid")

    rating: Literal["up", "down"] = Field(
        description="`up` confirms the examples the run taught the router; `down` removes them."
    )
    comment: str | None = Field(None, max_length=2000, description="What the user said.")


class FeedbackPublic(BaseModel):
    """What the feedback did."""

    thread_id: str = Field(description="The thread.")
    run_id: str = Field(description="The run.")
    rating: Literal["up", "down"] = Field(description="As sent.")
    examples: list[LearnedExamplePublic] = Field(
        description="The run's learned examples as the feedback left them: `confirmed` "
        "(up) or `removed` (down)."
    )
