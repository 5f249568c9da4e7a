"""Bodies of who-am-I and of the protected resource's metadata (RFC 9728)."""

from __future__ import annotations

from pydantic import BaseModel, Field


class PrincipalPublic(BaseModel):
    """Who the request acts as."""

    user: str | None = Field(description="The user id (null: development mode's local user).")
    scopes: list[str] = Field(description="What it may do: chat, tools, approve, admin.")
    key_id: str | None = Field(description="The public id of the API key used, if one.")
    agent: str | None = Field(description="On behalf of the user: the acting agent.")
    auth: str = Field(description="How the service authenticates: `api_keys`, or open.")
    spent_today_micro_usd: int | None = Field(
        None,
        description="What the user's runs cost today (UTC), in millionths of a US dollar "
        "(calls whose price is known); null for development mode's local user.",
    )
    daily_limit_micro_usd: int | None = Field(
        None,
        description="The daily spending limit, if one is set (SKILLDESK_DAILY_SPEND_LIMIT_USD).",
    )


class ResourceMetadataPublic(BaseModel):
    """OAuth 2.0 Protected Resource Metadata (RFC 9728), as MCP clients read it."""

    resource: str = Field(description="This resource's identifier (its URL).")
    authorization_servers: list[str] = Field(
        description="Authorization servers whose tokens this resource takes."
    )
    bearer_methods_supported: list[str] = Field(description="Always `header`.")
    scopes_supported: list[str] = Field(description="The scopes this resource knows.")
    resource_documentation: str | None = Field(None, description="Where the API is described.")
