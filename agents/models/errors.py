"""Turn provider exceptions into ModelErrors a person can act on."""

from __future__ import annotations

from collections.abc import Sequence

from litellm import exceptions as litellm_errors

from agents.errors import ModelError


def to_model_error(exc: Exception, profile: str, chain: Sequence[str]) -> ModelError:
    """Describe a failed call: what happened, which profiles were tried, what to check."""
    if isinstance(exc, ModelError):
        return exc
    tried = " → ".join(f"'{name}'" for name in chain)
    detail = _first_line(getattr(exc, "message", None) or str(exc))
    if isinstance(exc, litellm_errors.Timeout):
        code, what = "model_timeout", "did not answer in time"
        hint = "check that the model server is up, or raise timeout_s in the profile"
    elif isinstance(exc, litellm_errors.AuthenticationError):
        code, what = "model_auth_failed", "refused the API key"
        hint = "check the key (SKILLDESK_MODEL_API_KEY or the profile's api_key_env)"
    elif isinstance(exc, litellm_errors.NotFoundError):
        code, what = "model_not_found", "does not know this model"
        hint = "check the model name and the api_base of the profile"
    elif isinstance(exc, litellm_errors.RateLimitError):
        code, what = "model_rate_limited", "is rate limiting requests"
        hint = "wait a moment and try again, or add a fallback profile"
    elif isinstance(exc, litellm_errors.APIConnectionError):
        code, what = "model_unreachable", "could not be reached"
        hint = "check the api_base URL and that the model server is running"
    else:
        code, what = "model_unavailable", "failed"
        hint = "try again shortly; if it persists, check the model server's logs"
    message = (
        f"The language model {what} (profiles tried: {tried}). {hint[0].upper()}{hint[1:]}. "
        f"Provider said: {detail}"
    )
    return ModelError(message, profile=profile, code=code)


def _first_line(text: str, limit: int = 300) -> str:
    line = text.strip().splitlines()[0] if text.strip() else "no details"
    return line if len(line) <= limit else line[: limit - 1] + "…"
