"""Who may call the service and how much: API keys, on-behalf-of tokens, the OAuth resource
metadata, rate limits and the daily spending limit."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field, SecretStr


class AccessSettings(BaseModel):
    """Authentication and the limits per key and per user (a part of ``Settings``)."""

    api_keys: SecretStr | None = Field(
        None,
        description="Bootstrap API keys: `user:scope,scope:token` entries separated by spaces "
        "or `;` (scopes: chat, tools, approve, admin). More with `skilldesk keys create`.",
    )
    api_keys_file: Path | None = Field(
        None,
        description="A YAML file of bootstrap keys: a list of {user, scopes, name, token or "
        "sha256}.",
    )
    auth_disabled: bool = Field(
        False,
        description="Serve without authentication on any address: every caller is an admin. "
        "Only on a trusted network; without keys a non-loopback bind refuses to start.",
    )
    obo_issuer: str | None = Field(None, description="On-behalf-of tokens: the `iss` trusted.")
    obo_audience: str | None = Field(
        None, description="On-behalf-of tokens: the `aud` they must name (this service)."
    )
    obo_secret: SecretStr | None = Field(
        None, description="On-behalf-of tokens: an HS256 shared secret (or a key file below)."
    )
    obo_public_key_file: Path | None = Field(
        None, description="On-behalf-of tokens: a PEM public key (RS256 or ES256)."
    )
    obo_jwks_file: Path | None = Field(
        None, description="On-behalf-of tokens: a JWKS file (RS256 or ES256 keys by `kid`)."
    )
    obo_leeway_s: float = Field(
        30, ge=0, le=600, description="Clock skew allowed on a token's exp, nbf and iat."
    )
    oauth_authorization_servers: list[str] = Field(
        [],
        description="Authorization servers named in /.well-known/oauth-protected-resource "
        "(RFC 9728), for MCP clients.",
    )
    public_url: str | None = Field(
        None,
        description="The service's public base URL (https://host), for the resource metadata; "
        "default: the URL a request came to.",
    )
    rate_limit_per_minute: int = Field(
        600, ge=0, description="Requests per minute per API key (0: no limit); 429 beyond."
    )
    rate_limit_tokens_per_minute: int = Field(
        0,
        ge=0,
        description="Model tokens per minute per API key, counted as runs end (0: no "
        "limit); past it, requests are refused (429) until the next minute.",
    )
    daily_spend_limit_usd: float = Field(
        0,
        ge=0,
        description="What one user may spend on model calls per UTC day, in US dollars; past "
        "it new runs are refused (429 `spending_limit_reached`) until midnight UTC (0: none). "
        "Counts calls whose price is known.",
    )

    @property
    def daily_spend_limit_micro_usd(self) -> int:
        """``daily_spend_limit_usd`` in millionths of a dollar (0: none)."""
        return round(self.daily_spend_limit_usd * 1_000_000)
