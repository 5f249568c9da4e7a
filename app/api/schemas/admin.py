"""What operators' calls answer."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from app.auth.keys import MAX_LIFE_S, USER_PATTERN, check_user
from app.auth.principal import Scope


class ReloadPublic(BaseModel):
    """The skills and workflows folders read again, in every process."""

    skills: list[str] = Field(description="The skills this process serves now.")
    skill_errors: list[str] = Field(
        description="Every skill problem there is now, each with its file and fix: skills "
        "refused, and broken edits of skills that serve their last good version."
    )
    workflows: list[str] = Field(description="The workflows this process serves now.")
    workflow_errors: list[str] = Field(
        description="Every workflow problem there is now: workflows refused, each with why."
    )
    processes: int = Field(
        description="Service processes told to reload, this one included (1 without Redis)."
    )


class KeyCreate(BaseModel):
    """A new API key for a user."""

    model_config = ConfigDict(extra="forbid")

    user: str = Field(
        min_length=1,
        max_length=200,
        description="The user id the key acts as: no spaces around it, no control characters.",
        json_schema_extra={"pattern": USER_PATTERN},  # checked by ``check_user``, in words
    )
    scopes: list[Scope] = Field(["chat"], min_length=1, description="What it may do.")
    name: str = Field("", max_length=200, description="What the key is for.")

    expires_in_s: float | None = Field(
        None,
        gt=0,
        le=MAX_LIFE_S,
        allow_inf_nan=False,
        description="It stops working this many seconds from now, at most ten years (none: never).",
    )

    @field_validator("user")
    @classmethod
    def _a_user_id(cls, value: str) -> str:
        return check_user(value)


class KeyPublic(BaseModel):
    """A key as listings show it: never the key itself, nor its hash."""

    id: str = Field(description="Its public id (key_...), shown in logs and on refusals.")
    user: str = Field(description="The user it acts as.")
    scopes: list[str] = Field(description="What it may do.")
    name: str = Field(description="What it is for.")
    created: float | None = Field(description="When it was made (Unix time).")
    source: Literal["store", "bootstrap"] = Field(
        description="`store`: made here or with `skilldesk keys`; `bootstrap`: from "
        "SKILLDESK_API_KEYS or the keys file (changed there, not here)."
    )
    expires: float | None = Field(description="When it stops working (Unix time), or never.")
    revoked: float | None = Field(description="When it was revoked, if it was.")


class KeyCreated(KeyPublic):
    """A key just made, with the key itself: shown this once (the store keeps its hash)."""

    key: str = Field(description="Send it as `Authorization: Bearer <key>`.")


class KeyList(BaseModel):
    """Keys, newest first, a page at a time; the first page ends with the bootstrap ones."""

    data: list[KeyPublic]
    next_cursor: str | None = Field(
        None, description="Where the next page starts (`cursor`); none after the last."
    )
