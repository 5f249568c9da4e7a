"""Turn provider exceptions into ModelErrors a person can act on, and tell which are worth
another attempt.

The OpenAI transport raises its own status errors (ProviderStatusError) and aiohttp's
errors (the OpenAI SDK's and httpx2's on blocking calls); litellm raises the OpenAI SDK's
exception classes (its own subclass them) and httpx's.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence

import structlog

from agents.errors import MissingKey, ModelError, ProfileUnusable, StreamError, UnreadableReply

log = structlog.get_logger(__name__)


def _loaded(module: str, name: str) -> tuple[type[BaseException], ...]:
    """A class of ``module`` when that module is loaded: an exception of a library that was
    never imported cannot occur, and importing the OpenAI SDK only to compare against its
    classes would load ~500 modules into a service that does not otherwise use it."""
    loaded = sys.modules.get(module)
    return (getattr(loaded, name),) if loaded is not None else ()


def _timeouts() -> tuple[type[BaseException], ...]:
    return (
        TimeoutError,
        *_loaded("openai", "APITimeoutError"),
        *_loaded("httpx", "TimeoutException"),
        *_loaded("httpx2", "TimeoutException"),
    )


def _unreachable() -> tuple[type[BaseException], ...]:
    return (
        *_loaded("aiohttp", "ClientError"),
        *_loaded("openai", "APIConnectionError"),
        *_loaded("httpx", "TransportError"),
        *_loaded("httpx2", "TransportError"),
    )


_RETRY_STATUS = frozenset({408, 409, 429})
_MAX_RATE_LIMIT_WAIT_S = 4.0


def retry_delay(exc: Exception) -> float | None:
    """Seconds to wait before trying the same profile again, or ``None`` when another
    attempt would fail the same way (a refused key, an unknown model, a bad request): the
    next profile is tried instead."""
    exc = _unwrapped(exc)
    if isinstance(exc, _timeouts() + _unreachable()):
        return 0.0
    status = _status(exc)
    if status is None:
        return None
    if status == 429:  # a quota spent stays spent: the next profile, not another wait
        return None if _QUOTA.search(str(exc)) else _rate_limit_wait(exc)
    return 0.0 if status in _RETRY_STATUS or status >= 500 else None


# What providers say of a conversation past the context window (OpenAI, Anthropic, vLLM,
# Gemini...), and of a quota spent (no waiting helps: the operator must act).
_TOO_LONG = re.compile(
    r"context[ _]length|context window|maximum context|too many tokens|prompt is too long|"
    r"input is too long|reduce the length",
    re.IGNORECASE,
)
_QUOTA = re.compile(r"quota|billing|credit balance|insufficient", re.IGNORECASE)
_FIX = "the service's operator must fix its model settings (the service's log says how)"
_AGAIN = "try again shortly; if it persists, the service's log says why"


def to_model_error(exc: Exception, profile: str, chain: Sequence[str]) -> ModelError:
    """Describe a failed call: what happened for the user (``message``: never the provider's
    text, which may quote a key, an internal id or a host), and for the operator (``detail``,
    logged: which profiles were tried, what to check, what the provider said)."""
    if isinstance(exc, ModelError):
        return exc
    exc = _unwrapped(exc)
    tried = " → ".join(f"'{name}'" for name in chain)
    detail = _first_line(getattr(exc, "message", None) or str(exc) or type(exc).__name__)
    status = _status(exc)
    if isinstance(exc, _timeouts()):
        code, what, advice = "model_timeout", "did not answer in time", _AGAIN
        hint = "check that the model server is up, or raise timeout_s in the profile"
    elif status in (401, 403):
        code, what, advice = "model_auth_failed", "refused the service's credentials", _FIX
        hint = "check the key (SKILLDESK_MODEL_API_KEY or the profile's api_key_env)"
    elif status == 404:
        code, what, advice = "model_not_found", "does not know the model asked for", _FIX
        hint = "check the model name and the api_base of the profile"
    elif status in (400, 413, 422):
        code, what = "model_rejected_request", "refused the request"
        advice = (
            "the conversation is longer than the model can read: send a shorter message or "
            "start a new thread"
            if status == 413 or _TOO_LONG.search(detail)
            else _FIX  # a parameter or a schema of the service's: not the user's to change
        )
        hint = (
            "see what the provider said below: a conversation longer than the model's "
            "context window or a parameter the model does not take are the usual causes"
        )
    elif status == 429:
        code, what = "model_rate_limited", "is busy (rate limited)"
        advice = _FIX if _QUOTA.search(detail) else "try again in a moment"
        hint = "wait a moment and try again, or add a fallback profile"
    elif isinstance(exc, _unreachable()):
        code, what, advice = "model_unreachable", "could not be reached", _AGAIN
        hint = "check the api_base URL and that the model server is running"
    elif isinstance(exc, UnreadableReply | StreamError):
        code, what, advice = "model_bad_reply", "sent a reply that could not be used", _AGAIN
        hint = "check that the api_base points at an OpenAI-compatible chat completions API"
    elif isinstance(exc, ProfileUnusable) or (
        isinstance(exc, TypeError) and "unexpected keyword argument" in str(exc)
    ):  # the profile's kwargs hold one the model's client does not take
        code, what, advice = "model_misconfigured", "is not set up correctly", _FIX
        hint = "fix the profile in the models file (its model, its kwargs), then restart"
    elif isinstance(exc, MissingKey) or (
        isinstance(exc, _loaded("openai", "OpenAIError")) and "api_key" in str(exc)
    ):
        code, what, advice = "model_auth_failed", "has no API key", _FIX
        hint = "set the key (SKILLDESK_MODEL_API_KEY or the profile's api_key_env)"
    else:
        code, what, advice = "model_unavailable", "failed", _AGAIN
        hint = "try again shortly; if it persists, check the model server's logs"
    return ModelError(
        f"The language model {what}: {advice}.",
        profile=profile,
        code=code,
        detail=f"Profiles tried: {tried}. {hint[0].upper()}{hint[1:]}. Provider said: {detail}",
    )


def _unwrapped(exc: Exception) -> Exception:
    """The failure inside litellm's wrapper of a stream that broke mid-way
    (``MidStreamFallbackError``, always 503), so it is named as on the other paths."""
    inner = getattr(exc, "original_exception", None)
    if isinstance(exc, _loaded("litellm.exceptions", "MidStreamFallbackError")) and isinstance(
        inner, Exception
    ):
        return inner
    return exc


def _status(exc: Exception) -> int | None:
    status = getattr(exc, "status_code", None)
    return status if isinstance(status, int) else None


def _rate_limit_wait(exc: Exception) -> float:
    """The provider's Retry-After when it gives a short one, else half a second."""
    headers = getattr(exc, "headers", None) or getattr(
        getattr(exc, "response", None), "headers", None
    )
    raw = headers.get("retry-after") if headers is not None else None
    try:
        wait = float(raw) if raw is not None else 0.5
    except ValueError:
        wait = 0.5
    return min(max(wait, 0.0), _MAX_RATE_LIMIT_WAIT_S)


def _first_line(text: str, limit: int = 300) -> str:
    line = text.strip().splitlines()[0] if text.strip() else "no details"
    return line if len(line) <= limit else line[: limit - 1] + "…"


def logged(error: ModelError) -> ModelError:
    """``error``, its detail logged for the operator (``model.failed``): what its users read
    leaves the provider's words out."""
    log.warning("model.failed", code=error.code, profile=error.profile, detail=error.detail)
    return error
