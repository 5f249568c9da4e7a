"""The principal a request is served for: a user id and what the user may do."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

Scope = Literal["chat", "tools", "approve", "admin"]
SCOPES: tuple[str, ...] = get_args(Scope)
ALL_SCOPES = frozenset(SCOPES)


@dataclass(frozen=True)
class Principal:
    """Who a request acts as.

    Attributes:
        user: The user id whose threads the request sees; ``None`` is the local user of
            development mode (no keys configured), who sees every thread.
        scopes: What the user may do (``admin`` implies every other scope).
        key_id: The public id of the API key used (never the key), for rate limits and logs.
        agent: On behalf of a user: the calling agent (the user is ``user``).
    """

    user: str | None
    scopes: frozenset[str]
    key_id: str | None = None
    agent: str | None = None

    def can(self, scope: str) -> bool:
        """Whether the principal holds ``scope`` (admin holds them all)."""
        return scope in self.scopes or "admin" in self.scopes

    @property
    def sees_all(self) -> bool:
        """Development mode's local user and admins reach every user's threads."""
        return self.user is None or "admin" in self.scopes


LOCAL = Principal(user=None, scopes=ALL_SCOPES)
