"""Liveness and readiness bodies."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class HealthPublic(BaseModel):
    """The process is up."""

    status: Literal["ok"] = Field(description="Always `ok`: the process answers.")


class ReadinessPublic(BaseModel):
    """Whether the service can take conversations (the same body with 200 and 503)."""

    status: Literal["ready", "not ready"] = Field(description="`ready` with 200, else 503.")
    checkpointer: str = Field(
        description="The checkpoint store's class.", examples=["AsyncSqliteSaver"]
    )
    model: Literal["configured", "not configured"] = Field(
        description="Whether a language model is set; without one every reply says which "
        "setting to give."
    )
    auth: str = Field(
        "api_keys",
        description="How callers are authenticated: `api_keys`, `disabled` (the operator's "
        "choice), or open in development mode (no keys, loopback only).",
    )
    error: str | None = Field(
        None, description="Why the service is not ready (only when it is not)."
    )
