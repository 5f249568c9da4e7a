"""The model gateway: named profiles, built on litellm, used through LangChain.

The gateway (and litellm, slow to import) loads on first use, so commands that only read
configuration start fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agents.models.config import ModelProfile, ModelsConfig, load_models_config
from agents.models.usage import UsageRecord, UsageRecorder

if TYPE_CHECKING:
    from agents.models.gateway import ModelGateway

__all__ = [
    "ModelGateway",
    "ModelProfile",
    "ModelsConfig",
    "UsageRecord",
    "UsageRecorder",
    "load_models_config",
]


def __getattr__(name: str) -> Any:
    if name == "ModelGateway":
        from agents.models.gateway import ModelGateway

        return ModelGateway
    raise AttributeError(name)
