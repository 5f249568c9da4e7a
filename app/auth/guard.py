"""The one gate every surface goes through: credentials in, a principal out (or a 401, 403
or 429 saying what happened); development mode decided at start-up."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any

import structlog

from agents.errors import ConfigError
from agents.state.spend import SpendLedger
from app.api.errors import ApiError
from app.auth.keys import ApiKeys
from app.auth.obo import OboClaims, OboVerifier, TokenRefused
from app.auth.principal import LOCAL, Principal
from app.auth.ratelimit import RateLimiter

log = structlog.get_logger(__name__)
LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})
RECHECK_S = 5.0  # how often an open service looks for a key made meanwhile
OBO_SCOPES = frozenset({"chat", "tools", "approve"})  # admin is never delegated
FIX = (
    "create a key (`skilldesk keys create USER`), or give keys in SKILLDESK_API_KEYS or "
    "SKILLDESK_API_KEYS_FILE; on a trusted network only, SKILLDESK_AUTH_DISABLED=true"
)

# Where this resource's OAuth metadata (RFC 9728) is served.
METADATA = "/.well-known/oauth-protected-resource"


def _delegated(claims: OboClaims, agent: Principal) -> Principal:
    """The token's user, with the scopes both the agent and the token grant (``admin`` is
    never delegated: an admin agent passes on every other scope)."""
    allowed = OBO_SCOPES if "admin" in agent.scopes else agent.scopes & OBO_SCOPES
    scopes = allowed if claims.scopes is None else allowed & claims.scopes
    return Principal(
        user=claims.user, scopes=frozenset(scopes), key_id=agent.key_id, agent=agent.user
    )


def metadata_url(public_url: str | None, scheme: str, host: str | None) -> str:
    """The resource metadata's URL as a client reaches it: under SKILLDESK_PUBLIC_URL, or
    else the request's own scheme and host."""
    if public_url:
        return public_url.rstrip("/") + METADATA
    return f"{scheme}://{host or 'localhost'}{METADATA}"


@dataclass
class Gate:
    """Turns a request's credentials into its principal.

    Attributes:
        keys: The API keys.
        verifier: On-behalf-of tokens' verifier (None: such tokens are refused).
        limiter: Requests per minute per key (None: no limit).
        disabled: The operator turned authentication off (a trusted network).
    """

    keys: ApiKeys
    verifier: OboVerifier | None = None
    limiter: RateLimiter | None = None
    disabled: bool = False
    tokens_per_minute: int = 0
    spend: SpendLedger | None = None  # what each user's runs cost, per day
    open: bool = False
    _checked: float = field(default=0.0, repr=False)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set, repr=False)

    async def start(self, host: str) -> None:
        """Decide the mode: keys configured → every request needs one; none, bound to a
        loopback address (or authentication disabled) → open, and said so.

        Raises:
            ConfigError: no keys on a non-loopback address, naming the settings that fix it.
        """
        if self.disabled:
            self.open = True
            log.warning("auth.disabled", host=host, note="every caller is the local admin")
            return
        if await self.keys.any():
            self.open = False
            log.info("auth.api_keys")
            return
        if host not in LOOPBACK:
            raise ConfigError(f"no API keys are configured and the service binds {host}", fix=FIX)
        self.open = True
        self._checked = time.monotonic()
        log.warning("auth.open_development", host=host, fix=FIX)

    @property
    def mode(self) -> str:
        """How requests are authenticated, for /readyz."""
        if self.disabled:
            return "disabled"
        return "open (development: no API keys, loopback only)" if self.open else "api_keys"

    async def authenticate(self, authorization: str | None, on_behalf_of: str | None) -> Principal:
        """The principal of a request's ``Authorization`` and ``X-On-Behalf-Of`` headers.

        Raises:
            ApiError: 401 (no or bad credentials), 429 (over the key's rate).
        """
        token = _bearer(authorization)
        if token is None:
            if await self._still_open():
                return LOCAL
            raise self.unauthorized(
                "missing_credentials",
                "This needs an API key: send `Authorization: Bearer <key>`.",
            )
        try:
            principal = await self._verify(token, on_behalf_of)
        except ApiError:
            # Open (development): OpenAI clients send a key of some kind whatever the
            # server; one that does not verify leaves the caller the local user.
            if await self._still_open():
                return LOCAL
            raise
        await self._limit(principal)
        return principal

    async def _verify(self, token: str, on_behalf_of: str | None) -> Principal:
        if token.count(".") == 2 and self.verifier is not None and not token.startswith("sdk_"):
            return await self._alone(token)
        key = await self.keys.find(token)
        if key is None:
            raise self.unauthorized("invalid_api_key", "The API key is not valid.")
        if key.revoked is not None:
            raise self.unauthorized(
                "api_key_revoked",
                f"The API key {key.id} was revoked on {_when(key.revoked)}; use another key.",
            )
        if key.expired():
            raise self.unauthorized(
                "api_key_expired",
                f"The API key {key.id} expired on {_when(key.expires)}; use a new key.",
            )
        principal = key.principal()
        return self._obo(on_behalf_of, principal) if on_behalf_of else principal

    def unauthorized(self, code: str, message: str) -> ApiError:
        """A 401 with the Bearer challenge (RFC 6750, and RFC 9728's resource metadata, by
        its path: ``located`` makes it the URL a client can follow)."""
        challenge = f'Bearer resource_metadata="{METADATA}"'
        if code != "missing_credentials":
            challenge += ', error="invalid_token"'
        return ApiError(401, code, message, headers={"WWW-Authenticate": challenge})

    @staticmethod
    def located(error: ApiError, metadata: str) -> ApiError:
        """``error``, a 401's challenge naming the resource metadata at ``metadata`` (an
        absolute URL, ``metadata_url``): RFC 9728 clients follow it as it is."""
        headers = dict(error.headers or {})
        challenge = headers.get("WWW-Authenticate")
        if error.status == 401 and challenge is not None:
            headers["WWW-Authenticate"] = challenge.replace(
                f'resource_metadata="{METADATA}"', f'resource_metadata="{metadata}"'
            )
            error.headers = headers
        return error

    def _claims(self, token: str) -> OboClaims:
        if self.verifier is None:
            raise self.unauthorized(
                "obo_not_configured",
                "This service takes no on-behalf-of tokens (its operator has not configured "
                "SKILLDESK_OBO_ISSUER, SKILLDESK_OBO_AUDIENCE and a key).",
            )
        try:
            return self.verifier.verify(token)
        except TokenRefused as exc:
            raise self.unauthorized("invalid_token", f"Refused: {exc}.") from None

    def _obo(self, token: str, agent: Principal) -> Principal:
        """The user a token sent in ``X-On-Behalf-Of`` names, beside ``agent``'s key."""
        return _delegated(self._claims(token), agent)

    async def _alone(self, token: str) -> Principal:
        """The user a token sent alone names, acting through the agent it names: with no more
        than the agent's own keys in force would give it (a token is never stronger alone
        than beside its agent's key), and only for an agent that holds one."""
        claims = self._claims(token)
        if claims.agent is None:
            raise self.unauthorized(
                "invalid_token",
                "Refused: an on-behalf-of token sent alone must name its agent (`act.sub` "
                "or `azp`), or be sent in X-On-Behalf-Of beside the agent's own API key.",
            )
        now = time.time()
        held = [k for k in await self.keys.all(claims.agent) if k.revoked is None]
        in_force = [k for k in held if not k.expired(now)]
        if not in_force:
            raise self.unauthorized(
                "invalid_token",
                f"Refused: the token names agent {claims.agent[:100]!r}, which holds no API "
                "key in force here; an admin gives it one (`skilldesk keys create "
                "AGENT`), or send the token in X-On-Behalf-Of beside the agent's key.",
            )
        scopes = frozenset().union(*(k.principal().scopes for k in in_force))
        agent = Principal(user=claims.agent, scopes=scopes, key_id=f"agent:{claims.agent}")
        return _delegated(claims, agent)

    async def _limit(self, principal: Principal) -> None:
        if self.limiter is None or principal.key_id is None:
            return
        retry = await self.limiter.hit(principal.key_id)
        if retry is not None:
            raise _too_many("rate_limited", "Too many requests with this key", retry)
        if self.tokens_per_minute > 0:
            retry = await self.limiter.tokens_over(principal.key_id, self.tokens_per_minute)
            if retry is not None:
                raise _too_many(
                    "token_rate_limited", "This key's runs used their tokens this minute", retry
                )

    def usage_sink(self, principal: Principal) -> Callable[[dict[str, int]], None] | None:
        """Where the runs a request starts count what they used: their tokens against its
        key (the token rate), their cost against its user's day (the spending limit)."""
        limiter, key, spend, user = self.limiter, principal.key_id, self.spend, principal.user
        tokens = limiter is not None and key is not None and self.tokens_per_minute > 0
        costs = spend is not None and user is not None
        if not tokens and not costs:
            return None
        tasks = self._tasks

        def later(work: Any) -> None:
            task = asyncio.get_running_loop().create_task(work)
            tasks.add(task)
            task.add_done_callback(tasks.discard)

        def count(usage: dict[str, int]) -> None:
            used = usage.get("total_tokens") or (
                usage.get("input_tokens", 0) + usage.get("output_tokens", 0)
            )
            if tokens and used > 0:
                later(limiter.add_tokens(key, used))  # type: ignore[union-attr,arg-type]
            if costs and usage.get("cost_micro_usd"):
                later(spend.add(user, usage["cost_micro_usd"]))  # type: ignore[union-attr,arg-type]

        return count

    async def first_key_without_admin(self, scopes: Collection[str]) -> bool:
        """Whether a key with ``scopes`` would be the first key of a service in development
        mode, and lack ``admin``: it would end development mode leaving no key that can make
        or revoke keys through the API (``skilldesk keys``, on the store, still could)."""
        if self.disabled or not self.open or "admin" in scopes:
            return False
        return not await self.keys.any()

    def key_made(self) -> None:
        """A key was made through this process (``POST /v1/admin/keys``): open, it closes at
        once, not at its next look at the store (a client using the key it just made, or
        the page that made it, sees requests need one from now on)."""
        if self.open and not self.disabled:
            self.open = False
            log.info("auth.api_keys", note="a key was created: requests need one now")

    async def _still_open(self) -> bool:
        """Whether the service is still open: a key made meanwhile (by `skilldesk keys
        create` in another process) closes it within a few seconds."""
        if not self.open or self.disabled:
            return self.open
        now = time.monotonic()
        if now - self._checked > RECHECK_S:
            self._checked = now
            if await self.keys.any():
                self.open = False
                log.info("auth.api_keys", note="a key was created: requests need one now")
        return self.open


def _when(stamp: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(stamp or 0))


def _too_many(code: str, what: str, retry: float) -> ApiError:
    seconds = max(1, int(retry + 0.999))
    return ApiError(
        429, code, f"{what}; try again in {seconds} s.", headers={"Retry-After": str(seconds)}
    )


def _bearer(authorization: str | None) -> str | None:
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


def no_scope(principal: Principal, scope: str) -> ApiError:
    """The 403 of a principal without ``scope``."""
    held = ", ".join(sorted(principal.scopes)) or "none"
    return ApiError(
        403,
        "insufficient_scope",
        f"This needs the {scope!r} scope; the key holds: {held}.",
        headers={"WWW-Authenticate": f'Bearer error="insufficient_scope", scope="{scope}"'},
    )


def describe(principal: Principal) -> dict[str, Any]:
    """What logs may say of a principal (never a key or a token)."""
    return {"user": principal.user, "key_id": principal.key_id, "agent": principal.agent}


async def refusal(settings: Any) -> str | None:
    """Why ``skilldesk serve`` would refuse to start with ``settings`` (no keys on a
    non-loopback address), read before the server starts; None when it may start.

    Raises:
        ConfigError: a bootstrap key entry is wrong.
    """
    from agents.state.checkpointers import open_checkpointer
    from agents.state.documents import documents_for
    from app.auth.keys import bootstrap_keys

    if settings.auth_disabled or settings.host in LOOPBACK:
        return None
    secret = settings.api_keys.get_secret_value() if settings.api_keys else None
    if bootstrap_keys(secret, settings.api_keys_file):
        return None
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    async with open_checkpointer(settings.resolved_checkpoint_url) as saver:
        if await ApiKeys(documents_for(saver)).any():
            return None
    return f"no API keys are configured and the service binds {settings.host}\n  fix: {FIX}"
