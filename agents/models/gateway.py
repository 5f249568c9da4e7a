"""One gateway for every model call: profiles → a litellm Router → LangChain chat models."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import litellm
from litellm.router import Router

from agents.errors import NoModelConfigured
from agents.models.chat_model import GatewayChatModel
from agents.models.config import ModelsConfig, resolve_api_key
from agents.models.usage import UsageRecorder

# Keys for OpenAI-compatible servers that need none (vLLM, Ollama, a local proxy): the
# OpenAI client refuses to start without one.
_PLACEHOLDER_KEY = "sk-no-key-needed"

litellm.suppress_debug_info = True
litellm.drop_params = True


class ModelGateway:
    """Owns the Router built from the profiles and hands out chat models by profile name.

    Args:
        config: The validated profiles, or ``None`` for no-model mode.
        environ: Where ``api_key_env`` variables are read (defaults to ``os.environ``).
    """

    def __init__(
        self, config: ModelsConfig | None, environ: Mapping[str, str] | None = None
    ) -> None:
        self.config = config
        self.usage = UsageRecorder()
        self._router: Router | None = None
        if config is not None:
            self._router = Router(
                model_list=[
                    {
                        "model_name": name,
                        "litellm_params": {
                            "model": profile.litellm_model,
                            "api_base": profile.api_base,
                            "api_key": resolve_api_key(profile, environ)
                            or (_PLACEHOLDER_KEY if profile.api_base else None),
                            "timeout": profile.timeout_s,
                            "stream_timeout": profile.timeout_s,
                            "max_retries": 0,  # the Router retries; the SDK must not as well
                        },
                    }
                    for name, profile in config.profiles.items()
                ],
                fallbacks=[
                    {name: self.chain(name)[1:]}
                    for name, profile in config.profiles.items()
                    if profile.fallbacks
                ],
                disable_cooldowns=True,
                retry_after=0,
            )

    @property
    def configured(self) -> bool:
        """Whether any model is configured (``False`` in no-model mode)."""
        return self.config is not None

    @property
    def router(self) -> Router:
        """The litellm Router; raises NoModelConfigured in no-model mode."""
        if self._router is None:
            raise NoModelConfigured()
        return self._router

    def chat_model(self, profile: str | None = None, **call_kwargs: Any) -> GatewayChatModel:
        """A LangChain chat model for ``profile`` (the default profile when ``None``)."""
        if self.config is None:
            raise NoModelConfigured()
        name = profile or self.config.default
        self.config.get(name)  # unknown names fail here, naming the known ones
        return GatewayChatModel(gateway=self, profile_name=name, call_kwargs=call_kwargs)

    def request_params(self, profile: str) -> dict[str, Any]:
        """Per-call Router parameters of a profile."""
        if self.config is None:
            raise NoModelConfigured()
        spec = self.config.get(profile)
        params: dict[str, Any] = {"model": profile, "num_retries": spec.retries}
        if spec.temperature is not None:
            params["temperature"] = spec.temperature
        if spec.max_tokens is not None:
            params["max_tokens"] = spec.max_tokens
        return params

    def chain(self, profile: str) -> list[str]:
        """The profile followed by its fallbacks, depth first, each once."""
        order: list[str] = []

        def visit(name: str) -> None:
            if name in order or self.config is None:
                return
            order.append(name)
            for fallback in self.config.get(name).fallbacks:
                visit(fallback)

        visit(profile)
        return order
