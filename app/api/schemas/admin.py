"""What operators' calls answer."""

from __future__ import annotations

from pydantic import BaseModel, Field


class ReloadPublic(BaseModel):
    """The skills and workflows folders read again, in every process."""

    skills: list[str] = Field(description="The skills this process serves now.")
    skill_errors: list[str] = Field(description="Skills refused, each with its file and fix.")
    workflows: list[str] = Field(description="The workflows this process serves now.")
    workflow_errors: list[str] = Field(description="Workflows refused, each with why.")
    processes: int = Field(
        description="Service processes told to reload, this one included (1 without Redis)."
    )
