"""The two kinds of error: authoring/configuration mistakes and runtime failures."""

from __future__ import annotations


class SkilldeskError(Exception):
    """Base class of every error Skilldesk raises on purpose."""


class ConfigError(SkilldeskError):
    """A configuration or authoring mistake, found at load time.

    Args:
        message: What is wrong, naming the setting, file or profile.
        fix: How to fix it, in one sentence.
    """

    def __init__(self, message: str, *, fix: str | None = None) -> None:
        self.message = message
        self.fix = fix
        super().__init__(f"{message}\n  fix: {fix}" if fix else message)


class ModelError(SkilldeskError):
    """A model call failed after its retries and fallbacks.

    Args:
        message: What happened, in words a user can act on.
        profile: The model profile that was asked.
        code: A stable machine-readable code (``model_timeout``, ``model_unavailable``...).
    """

    def __init__(self, message: str, *, profile: str, code: str = "model_error") -> None:
        self.message = message
        self.profile = profile
        self.code = code
        super().__init__(message)


class NoModelConfigured(ModelError):
    """No model profile is configured: the service runs in no-model mode."""

    def __init__(self) -> None:
        super().__init__(NO_MODEL_HINT, profile="default", code="no_model_configured")


NO_MODEL_HINT = (
    "No language model is configured, so I can't answer free-form messages yet. "
    "Set SKILLDESK_MODEL (for example 'openai/gpt-4o-mini'), with SKILLDESK_MODEL_API_BASE "
    "and SKILLDESK_MODEL_API_KEY as your provider needs, or point SKILLDESK_MODELS_FILE "
    "at a models YAML file, then restart the service."
)
